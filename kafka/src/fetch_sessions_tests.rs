use super::*;

fn part(topic: &str, partition: i32, fetch_offset: i64) -> FetchedPartition {
    FetchedPartition {
        topic: topic.into(),
        partition,
        fetch_offset,
        max_bytes: 1 << 20,
        leader_epoch: -1,
    }
}

fn quiet(high_watermark: i64) -> Answered {
    Answered {
        error_code: 0,
        high_watermark,
        log_start_offset: 0,
        has_records: false,
    }
}

fn with_records(high_watermark: i64) -> Answered {
    Answered {
        has_records: true,
        ..quiet(high_watermark)
    }
}

fn ask(
    session_id: i32,
    epoch: i32,
    named: Vec<FetchedPartition>,
    forgotten: &[(Arc<str>, i32)],
) -> Ask {
    Ask {
        session_id,
        epoch,
        named,
        forgotten: forgotten.to_vec(),
    }
}

fn alice() -> Principal {
    Principal::User("alice".into())
}

/// Opens a session of `named` for alice with id 7, answered with every partition quiet at 0.
fn opened(sessions: &mut FetchSessions, named: Vec<FetchedPartition>) -> i32 {
    let now = Instant::now();
    let plan = sessions
        .begin(
            &alice(),
            ask(NO_SESSION, INITIAL_EPOCH, named, &[]),
            now,
            || 7,
        )
        .unwrap();
    assert_eq!((plan.session_id, plan.incremental), (7, false));
    let carried = sessions.finish(&plan, plan.partitions.iter().map(|_| quiet(0)));
    assert!(
        carried.iter().all(|c| *c),
        "a full answer carries every partition"
    );
    plan.session_id
}

fn incremental(
    sessions: &mut FetchSessions,
    id: i32,
    epoch: i32,
    named: Vec<FetchedPartition>,
    forgotten: &[(Arc<str>, i32)],
) -> Result<Plan, i16> {
    sessions.begin(
        &alice(),
        ask(id, epoch, named, forgotten),
        Instant::now(),
        || 99,
    )
}

#[test]
fn a_sessionless_fetch_keeps_nothing_and_answers_everything() {
    let mut sessions = FetchSessions::new(10, 100);
    let named = vec![part("a", 0, 5), part("a", 1, 0)];
    let plan = sessions
        .begin(
            &alice(),
            ask(NO_SESSION, FINAL_EPOCH, named.clone(), &[]),
            Instant::now(),
            || 7,
        )
        .unwrap();
    assert_eq!(plan.session_id, NO_SESSION);
    assert!(!plan.incremental);
    assert_eq!(plan.partitions, named);
    assert_eq!(sessions.finish(&plan, [quiet(1), quiet(1)]), [true, true]);
    assert_eq!(sessions.len(), (0, 0));
}

#[test]
fn an_incremental_answer_carries_only_what_changed() {
    let mut sessions = FetchSessions::new(10, 100);
    let id = opened(
        &mut sessions,
        vec![part("a", 0, 0), part("a", 1, 0), part("b", 0, 0)],
    );
    assert_eq!(sessions.len(), (1, 3));

    // Nothing named: every session partition is read, in its order.
    let plan = incremental(&mut sessions, id, 1, vec![], &[]).unwrap();
    assert!(plan.incremental);
    assert_eq!(
        plan.partitions,
        vec![part("a", 0, 0), part("a", 1, 0), part("b", 0, 0)]
    );
    let errored = Answered {
        error_code: 1,
        ..quiet(0)
    };
    // a-0 has records, a-1 is as it was, b-0 failed.
    let carried = sessions.finish(&plan, [with_records(10), quiet(0), errored]);
    assert_eq!(carried, [true, false, true]);

    // The client read a-0 up to 10 and names it; a-1's high watermark moved.
    let plan = incremental(&mut sessions, id, 2, vec![part("a", 0, 10)], &[]).unwrap();
    // a-0 returned records last time, so it went to the end.
    assert_eq!(
        plan.partitions,
        vec![part("a", 1, 0), part("b", 0, 0), part("a", 0, 10)]
    );
    let carried = sessions.finish(&plan, [quiet(3), quiet(0), quiet(10)]);
    // b-0 answered an error last time: once clean it is carried again, as in Kafka, even
    // with the same numbers; a-0 moved to 10 and answers high watermark 10, as told.
    assert_eq!(carried, [true, true, false]);
    let plan = incremental(&mut sessions, id, 3, vec![], &[]).unwrap();
    let carried = sessions.finish(&plan, [quiet(3), quiet(0), quiet(10)]);
    assert_eq!(carried, [false, false, false], "nothing new");
    // Only the log start moves (retention, DeleteRecords): carried.
    let plan = incremental(&mut sessions, id, 4, vec![], &[]).unwrap();
    let moved_start = Answered {
        log_start_offset: 2,
        ..quiet(3)
    };
    let carried = sessions.finish(&plan, [moved_start, quiet(0), quiet(10)]);
    assert_eq!(carried, [true, false, false]);
}

#[test]
fn oversized_names_and_empty_fetches_get_no_session() {
    let mut sessions = FetchSessions::new(10, 100);
    let long = "t".repeat(TOPIC_NAME_BYTES_MAX + 1);
    let plan = sessions
        .begin(
            &alice(),
            ask(NO_SESSION, INITIAL_EPOCH, vec![part(&long, 0, 0)], &[]),
            Instant::now(),
            || 7,
        )
        .unwrap();
    assert_eq!(plan.session_id, NO_SESSION);
    let plan = sessions
        .begin(
            &alice(),
            ask(NO_SESSION, INITIAL_EPOCH, vec![], &[]),
            Instant::now(),
            || 7,
        )
        .unwrap();
    assert_eq!(plan.session_id, NO_SESSION);
    // Named into a session, an oversized name ends it.
    let id = opened(&mut sessions, vec![part("a", 0, 0)]);
    assert_eq!(
        incremental(&mut sessions, id, 1, vec![part(&long, 0, 0)], &[]),
        Err(ResponseError::FetchSessionIdNotFound.code())
    );
    assert_eq!(sessions.len(), (0, 0));
    // Named and forgotten in one fetch: it leaves, as in Kafka.
    let id = opened(&mut sessions, vec![part("a", 0, 0)]);
    let plan = incremental(
        &mut sessions,
        id,
        1,
        vec![part("b", 0, 0)],
        &[("b".into(), 0)],
    )
    .unwrap();
    assert_eq!(plan.partitions, vec![part("a", 0, 0)]);
}

#[test]
fn epochs_must_follow_and_ids_are_their_owners_alone() {
    let mut sessions = FetchSessions::new(10, 100);
    let id = opened(&mut sessions, vec![part("a", 0, 0)]);
    assert_eq!(
        incremental(&mut sessions, id, 2, vec![], &[]),
        Err(ResponseError::InvalidFetchSessionEpoch.code())
    );
    assert_eq!(
        incremental(&mut sessions, id + 1, 1, vec![], &[]),
        Err(ResponseError::FetchSessionIdNotFound.code())
    );
    let mallory = Principal::User("mallory".into());
    let stolen = sessions.begin(&mallory, ask(id, 1, vec![], &[]), Instant::now(), || 8);
    assert_eq!(stolen, Err(ResponseError::FetchSessionIdNotFound.code()));
    // Nor may anyone else end it.
    let plan = sessions
        .begin(
            &mallory,
            ask(id, FINAL_EPOCH, vec![], &[]),
            Instant::now(),
            || 8,
        )
        .unwrap();
    assert_eq!(plan.session_id, NO_SESSION);
    assert_eq!(sessions.len(), (1, 1));
    // The failed tries changed nothing: epoch 1 is still the next.
    assert!(incremental(&mut sessions, id, 1, vec![], &[]).is_ok());
    assert!(incremental(&mut sessions, id, 2, vec![], &[]).is_ok());
    assert_eq!(next_epoch(i32::MAX), 1);
}

#[test]
fn forgotten_partitions_leave_and_named_ones_join() {
    let mut sessions = FetchSessions::new(10, 100);
    let id = opened(&mut sessions, vec![part("a", 0, 0), part("a", 1, 0)]);
    let plan = incremental(
        &mut sessions,
        id,
        1,
        vec![part("c", 4, 2)],
        &[("a".into(), 0)],
    )
    .unwrap();
    assert_eq!(plan.partitions, vec![part("a", 1, 0), part("c", 4, 2)]);
    assert_eq!(sessions.len(), (1, 2));
    // A partition new to the session is always carried the first time.
    assert_eq!(sessions.finish(&plan, [quiet(0), quiet(0)]), [false, true]);
}

#[test]
fn final_and_initial_fetches_end_the_session_they_name() {
    let mut sessions = FetchSessions::new(10, 100);
    let id = opened(&mut sessions, vec![part("a", 0, 0)]);
    let plan = sessions
        .begin(
            &alice(),
            ask(id, FINAL_EPOCH, vec![], &[]),
            Instant::now(),
            || 8,
        )
        .unwrap();
    assert_eq!(plan.session_id, NO_SESSION);
    assert_eq!(sessions.len(), (0, 0));
    let id = opened(&mut sessions, vec![part("a", 0, 0)]);
    let plan = sessions
        .begin(
            &alice(),
            ask(id, INITIAL_EPOCH, vec![part("b", 0, 0)], &[]),
            Instant::now(),
            || 8,
        )
        .unwrap();
    assert_eq!(plan.session_id, 8);
    assert_eq!(sessions.len(), (1, 1));
}

#[test]
fn past_the_bounds_fetches_go_sessionless_and_idle_sessions_make_room() {
    let start = Instant::now();
    let mut sessions = FetchSessions::new(2, 5);
    let open = |sessions: &mut FetchSessions, named: Vec<FetchedPartition>, at: Instant, id| {
        sessions
            .begin(
                &alice(),
                ask(NO_SESSION, INITIAL_EPOCH, named, &[]),
                at,
                || id,
            )
            .unwrap()
            .session_id
    };
    // Too many partitions for any session.
    let six: Vec<_> = (0..6).map(|p| part("a", p, 0)).collect();
    assert_eq!(open(&mut sessions, six, start, 1), NO_SESSION);
    assert_eq!(open(&mut sessions, vec![part("a", 0, 0)], start, 1), 1);
    assert_eq!(open(&mut sessions, vec![part("a", 1, 0)], start, 2), 2);
    // Two sessions are the most; neither is idle long enough to go.
    let soon = start + Duration::from_secs(1);
    assert_eq!(
        open(&mut sessions, vec![part("a", 2, 0)], soon, 3),
        NO_SESSION
    );
    // Session 2 is used; later, session 1 has idled past the eviction time and goes.
    assert!(
        sessions
            .begin(
                &alice(),
                ask(2, 1, vec![], &[]),
                start + Duration::from_secs(60),
                || 0
            )
            .is_ok()
    );
    let later = start + EVICTABLE_AFTER + Duration::from_secs(1);
    assert_eq!(open(&mut sessions, vec![part("a", 2, 0)], later, 3), 3);
    assert_eq!(sessions.len(), (2, 2));
    // An incremental fetch that would grow past the partitions kept ends its session.
    let more: Vec<_> = (10..14).map(|p| part("a", p, 0)).collect();
    assert_eq!(
        sessions.begin(&alice(), ask(3, 1, more, &[]), later, || 0),
        Err(ResponseError::FetchSessionIdNotFound.code())
    );
    assert_eq!(sessions.len(), (1, 1));
    // An id already in use, or not positive, is never handed out.
    let mut draws = [2, -5, 0, 9].into_iter();
    let plan = sessions
        .begin(
            &alice(),
            ask(NO_SESSION, INITIAL_EPOCH, vec![part("z", 0, 0)], &[]),
            later,
            || draws.next().unwrap_or(0),
        )
        .unwrap();
    assert_eq!(plan.session_id, 9);
}
