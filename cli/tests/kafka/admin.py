"""Kafka admin clients against a Tailstream cluster (run by cli/tests/cluster/kafka_admin.rs).

  admin.py CLIENT BOOTSTRAP TOPIC GROUP

CLIENT is kafka-python (KafkaAdminClient) or confluent (confluent-kafka's AdminClient, a
current librdkafka). In order, each step checked as it goes (a failed check raises, and the
script exits non-zero with why):
  0. DescribeCluster (flexible from v0) lists every broker.
  1. CreateTopics: TOPIC with 6 partitions, replication factor 2 and retention settings; the
     same name again is TOPIC_ALREADY_EXISTS; a compacted topic is INVALID_CONFIG naming
     cleanup.policy; validate_only creates nothing.
  2. Metadata shows TOPIC's 6 partitions; DescribeConfigs shows its settings.
     IncrementalAlterConfigs changes retention.ms (DescribeConfigs shows the new value, and
     retention.bytes as it was); a fixed setting (segment.bytes) is INVALID_CONFIG saying so;
     DELETE puts retention.ms back to the default (-1). kafka-python also sends AlterConfigs
     (the whole config) for retention.bytes.
  3. A consumer of GROUP reads what was produced; while it is a member, DescribeGroups shows
     it Stable with one member; ListGroups (sent to every broker, merged) lists GROUP once.
     DeleteGroups refuses GROUP while it has members (kafka-python).
  4. Once the consumer closed, GROUP is Empty; OffsetDelete removes one partition's offset
     (kafka-python; confluent-kafka for Python has no call for it),
     DeleteGroups removes the group (then Dead, not listed).
  5. CreatePartitions grows TOPIC from 6 partitions (2 streamlets of 3 logs) to 9; 10 (not a
     whole streamlet) and 9 again are INVALID_PARTITIONS; a record produced to new partition
     8 is read back from it.
  6. DeleteRecords deletes that record (partition 8's start moves to 1: its earliest offset),
     and an offset past the end is OFFSET_OUT_OF_RANGE.
  7. DeleteTopics deletes TOPIC, and a second delete is UNKNOWN_TOPIC_OR_PARTITION.
Prints "ok CLIENT" at the end.
"""
import sys
import time


def check(condition, what):
    if not condition:
        raise SystemExit(f"check failed: {what}")


def wait_for(what, probe, timeout_s=30):
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.2)


def kafka_python(bootstrap, topic, group):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=bootstrap.split(","), request_timeout_ms=20000)
    cluster = admin.describe_cluster()
    check(cluster["cluster_id"] == "tailstream", f"cluster id: {cluster}")
    check(len(cluster["brokers"]) == len(bootstrap.split(",")), f"every broker: {cluster}")
    settings = {
        "num_partitions": 6,
        "replication_factor": 2,
        "configs": {"retention.ms": "3600000", "retention.bytes": "1048576"},
    }
    created = admin.create_topics({topic: settings}, raise_errors=False)
    check([t["error_code"] for t in created["topics"]] == [0], f"created: {created}")
    again = admin.create_topics({topic: settings}, raise_errors=False)
    check(again["topics"][0]["error_code"] == 36, f"TOPIC_ALREADY_EXISTS: {again}")
    compacted = admin.create_topics(
        {topic + "-compacted": {"num_partitions": 1, "replication_factor": 1,
                                "configs": {"cleanup.policy": "compact"}}},
        raise_errors=False,
    )
    answer = compacted["topics"][0]
    check(answer["error_code"] == 40 and "cleanup.policy" in (answer["error_message"] or ""),
          f"INVALID_CONFIG naming cleanup.policy: {compacted}")
    dry = admin.create_topics({topic + "-dry": settings}, validate_only=True, raise_errors=False)
    check(dry["topics"][0]["error_code"] == 0, f"validate_only: {dry}")
    check(topic + "-dry" not in admin.list_topics(), "validate_only created nothing")
    taken = admin.create_topics({topic: settings}, validate_only=True, raise_errors=False)
    check(taken["topics"][0]["error_code"] == 36, f"validate_only of a taken name: {taken}")
    # Kafka's default min.insync.replicas, set explicitly on an unreplicated topic.
    single = admin.create_topics(
        {topic + "-single": {"num_partitions": 2, "replication_factor": 1,
                             "configs": {"min.insync.replicas": "1"}}},
        raise_errors=False,
    )
    check(single["topics"][0]["error_code"] == 0, f"factor 1, min.insync.replicas 1: {single}")

    described = admin.describe_topics([topic])
    check(len(described[0]["partitions"]) == 6, f"6 partitions: {described}")
    configs = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                     config_filter="all")
    values = {name: c["value"] for name, c in configs["topic"][topic].items()}
    check(values.get("retention.ms") == "3600000", f"retention.ms: {values}")
    check(values.get("retention.bytes") == "1048576", f"retention.bytes: {values}")
    check(values.get("min.insync.replicas") == "2", f"min.insync.replicas: {values}")

    def configs_now():
        described = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                           config_filter="all")
        return {name: c["value"] for name, c in described["topic"][topic].items()}

    def alter(configs, **options):
        resource = ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)
        return admin.alter_configs([resource], **options)["topic"][topic]

    result = alter({"retention.ms": "7200000"})  # IncrementalAlterConfigs (the broker has it)
    check(result == "OK", f"retention.ms altered: {result}")
    values = configs_now()
    check(values.get("retention.ms") == "7200000", f"retention.ms altered: {values}")
    check(values.get("retention.bytes") == "1048576", f"retention.bytes as it was: {values}")
    result = alter({"retention.bytes": "2097152", "retention.ms": "7200000"}, incremental=False)
    check(result == "OK", f"AlterConfigs: {result}")
    check(configs_now().get("retention.bytes") == "2097152", "retention.bytes altered")
    result = alter({"segment.bytes": "1"}, raise_on_unknown=False)
    check("InvalidConfig" in result and "fixed" in result, f"segment.bytes is fixed: {result}")
    reset = admin.reset_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                configs=["retention.ms"])])
    check(reset["topic"][topic] == "OK", f"reset: {reset}")
    check(configs_now().get("retention.ms") == "-1", "retention.ms back to the default")

    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all")
    for i in range(12):
        producer.send(topic, key=str(i).encode(), value=f"v{i}".encode())
    producer.flush(timeout=60)
    producer.close()
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap.split(","), group_id=group,
                             auto_offset_reset="earliest", enable_auto_commit=False,
                             session_timeout_ms=10000, heartbeat_interval_ms=300)
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 12 and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            seen += len(records)
    check(seen == 12, f"read 12 records, got {seen}")
    consumer.commit()

    def stable():
        group_info = admin.describe_groups([group])[group]
        return group_info if group_info["group_state"] == "Stable" else None

    info = wait_for("a Stable group", stable)
    check(len(info["members"]) == 1, f"one member: {info}")
    check(info["protocol_type"] == "consumer", f"protocol type: {info}")
    assigned = info["members"][0]["member_assignment"]["assigned_partitions"]
    check([(a["topic"], sorted(a["partitions"])) for a in assigned] == [(topic, list(range(6)))],
          f"the member's assignment, decoded: {assigned}")
    listed = [g["group_id"] for g in admin.list_groups()]
    check(listed.count(group) == 1, f"{group} listed once: {listed}")
    refused = admin.delete_groups([group])
    check(refused == {group: "NonEmptyGroupError"}, f"a group with members stays: {refused}")
    consumer.close()
    empty = wait_for("an Empty group",
                     lambda: admin.describe_groups([group])[group]["group_state"] == "Empty")
    check(empty, "Empty")

    from kafka.errors import NoError
    before = admin.list_group_offsets({group: None})[group]
    check(before, "offsets committed")
    first = sorted(before)[0]
    removed = admin.delete_group_offsets(group, [first])
    check(removed == {first: NoError}, f"OffsetDelete: {removed}")
    after = admin.list_group_offsets({group: None})[group]
    check(first not in after and len(after) == len(before) - 1, f"{before} -> {after}")
    deleted = admin.delete_groups([group])
    check(deleted == {group: "OK"}, f"DeleteGroups: {deleted}")
    check(admin.describe_groups([group])[group]["group_state"] == "Dead", "a deleted group is Dead")
    check(group not in [g["group_id"] for g in admin.list_groups()], "a deleted group is not listed")
    again = admin.delete_groups([group])
    check(again == {group: "GroupIdNotFoundError"}, f"deleted twice: {again}")

    grown = admin.create_partitions({topic: 9}, raise_errors=False)
    check([r.error_code for r in grown.results] == [0], f"grown to 9: {grown}")
    for count in (10, 9):
        refused = admin.create_partitions({topic: count}, raise_errors=False)
        check([r.error_code for r in refused.results] == [37],
              f"{count} partitions: INVALID_PARTITIONS: {refused}")
    described = admin.describe_topics([topic])
    check(len(described[0]["partitions"]) == 9, f"9 partitions: {described}")
    producer = KafkaProducer(bootstrap_servers=bootstrap.split(","), acks="all")
    producer.send(topic, value=b"in a new partition", partition=8).get(timeout=60)
    producer.close()
    reader = KafkaConsumer(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                           auto_offset_reset="earliest")
    reader.assign([TopicPartition(topic, 8)])
    values = []
    deadline = time.monotonic() + 60
    while not values and time.monotonic() < deadline:
        for records in reader.poll(timeout_ms=500).values():
            values.extend(r.value for r in records)
    check(values == [b"in a new partition"], f"read back from partition 8: {values}")
    eighth = TopicPartition(topic, 8)
    trimmed = admin.delete_records({eighth: 1})
    check(trimmed[eighth]["low_watermark"] == 1, f"DeleteRecords: {trimmed}")
    check(reader.beginning_offsets([eighth]) == {eighth: 1}, "partition 8 starts at 1")
    from kafka.errors import OffsetOutOfRangeError
    try:
        admin.delete_records({eighth: 5})
        check(False, "an offset past the end is refused")
    except OffsetOutOfRangeError:
        pass
    reader.close()

    deleted = admin.delete_topics([topic], raise_errors=False)
    check([t["error_code"] for t in deleted["topics"]] == [0], f"deleted: {deleted}")
    check(topic not in admin.list_topics(), "deleted topic not listed")
    gone = admin.delete_topics([topic], raise_errors=False)
    check(gone["topics"][0]["error_code"] == 3, f"UNKNOWN_TOPIC_OR_PARTITION: {gone}")
    admin.close()


def confluent(bootstrap, topic, group):
    from confluent_kafka import (OFFSET_BEGINNING, Consumer, ConsumerGroupState, KafkaError,
                                 Producer, TopicPartition)
    from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry,
                                       ConfigResource, NewPartitions, NewTopic, ResourceType)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    cluster = admin.describe_cluster().result(30)
    check(cluster.cluster_id == "tailstream", f"cluster id: {cluster}")
    check(len(cluster.nodes) == len(bootstrap.split(",")), f"every broker: {cluster}")

    def create(new_topic, **options):
        try:
            admin.create_topics([new_topic], **options)[new_topic.topic].result(30)
            return None
        except Exception as error:  # the future raises KafkaException(KafkaError)
            return error.args[0]

    settings = {"retention.ms": "3600000", "retention.bytes": "1048576"}
    error = create(NewTopic(topic, num_partitions=6, replication_factor=2, config=settings))
    check(error is None, f"created: {error}")
    error = create(NewTopic(topic, num_partitions=6, replication_factor=2, config=settings))
    check(error is not None and error.code() == KafkaError.TOPIC_ALREADY_EXISTS,
          f"TOPIC_ALREADY_EXISTS: {error}")
    error = create(NewTopic(topic + "-compacted", num_partitions=1, replication_factor=1,
                            config={"cleanup.policy": "compact"}))
    check(error is not None and error.code() == KafkaError.INVALID_CONFIG
          and "cleanup.policy" in error.str(), f"INVALID_CONFIG naming cleanup.policy: {error}")
    error = create(NewTopic(topic + "-dry", num_partitions=6, replication_factor=2),
                   validate_only=True)
    check(error is None, f"validate_only: {error}")
    check(topic + "-dry" not in admin.list_topics(timeout=10).topics, "validate_only created nothing")

    metadata = admin.list_topics(topic, timeout=10)
    check(len(metadata.topics[topic].partitions) == 6, "6 partitions")
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(30)
    values = {name: entry.value for name, entry in entries.items()}
    check(values.get("retention.ms") == "3600000", f"retention.ms: {values}")
    check(values.get("retention.bytes") == "1048576", f"retention.bytes: {values}")
    check(values.get("min.insync.replicas") == "2", f"min.insync.replicas: {values}")

    def alter(name, value, operation=AlterConfigOpType.SET):
        entry = ConfigEntry(name, value, incremental_operation=operation)
        altered = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[entry])
        try:
            admin.incremental_alter_configs([altered])[altered].result(30)
            return None
        except Exception as error:  # KafkaException(KafkaError)
            return error.args[0]

    def configs_now():
        entries = admin.describe_configs([resource])[resource].result(30)
        return {name: entry.value for name, entry in entries.items()}

    error = alter("retention.ms", "7200000")
    check(error is None, f"retention.ms altered: {error}")
    values = configs_now()
    check(values.get("retention.ms") == "7200000", f"retention.ms altered: {values}")
    check(values.get("retention.bytes") == "1048576", f"retention.bytes as it was: {values}")
    error = alter("segment.bytes", "1")
    check(error is not None and error.code() == KafkaError.INVALID_CONFIG
          and "fixed" in error.str(), f"segment.bytes is fixed: {error}")
    error = alter("retention.ms", None, AlterConfigOpType.DELETE)
    check(error is None, f"retention.ms deleted: {error}")
    check(configs_now().get("retention.ms") == "-1", "retention.ms back to the default")

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(12):
        producer.produce(topic, key=str(i), value=f"v{i}")
    check(producer.flush(60) == 0, "every record delivered")
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 10000})
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 60
    while seen < 12 and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            seen += 1
    check(seen == 12, f"read 12 records, got {seen}")
    consumer.commit(asynchronous=False)

    def describe():
        return admin.describe_consumer_groups([group])[group].result(30)

    info = wait_for("a Stable group", lambda: (lambda d: d if d.state == ConsumerGroupState.STABLE
                                               else None)(describe()))
    check(len(info.members) == 1, f"one member: {info}")
    listed = [g.group_id for g in admin.list_consumer_groups().result(30).valid]
    check(listed.count(group) == 1, f"{group} listed once: {listed}")
    consumer.close()
    wait_for("an Empty group", lambda: describe().state == ConsumerGroupState.EMPTY)

    # (confluent-kafka for Python has no call for OffsetDelete: kafka-python's covers it.)
    admin.delete_consumer_groups([group])[group].result(30)
    check(describe().state == ConsumerGroupState.DEAD, "a deleted group is Dead")
    listed = [g.group_id for g in admin.list_consumer_groups().result(30).valid]
    check(group not in listed, f"a deleted group is not listed: {listed}")

    admin.create_partitions([NewPartitions(topic, 9)])[topic].result(30)
    for count in (10, 9):
        try:
            admin.create_partitions([NewPartitions(topic, count)])[topic].result(30)
            check(False, f"{count} partitions refused")
        except Exception as error:
            check(error.args[0].code() == KafkaError.INVALID_PARTITIONS,
                  f"{count} partitions: INVALID_PARTITIONS: {error}")
    metadata = admin.list_topics(topic, timeout=10)
    check(len(metadata.topics[topic].partitions) == 9, "9 partitions")
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    producer.produce(topic, value="in a new partition", partition=8)
    check(producer.flush(60) == 0, "the record to partition 8 delivered")
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group + "-reader",
                       "enable.auto.commit": False})
    reader.assign([TopicPartition(topic, 8, OFFSET_BEGINNING)])
    values = []
    deadline = time.monotonic() + 60
    while not values and time.monotonic() < deadline:
        message = reader.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
    check(values == [b"in a new partition"], f"read back from partition 8: {values}")
    trimmed = admin.delete_records([TopicPartition(topic, 8, 1)])
    low = list(trimmed.values())[0].result(30).low_watermark
    check(low == 1, f"DeleteRecords: low watermark {low}")
    marks = reader.get_watermark_offsets(TopicPartition(topic, 8), timeout=10, cached=False)
    check(marks == (1, 1), f"partition 8 starts at 1: {marks}")
    try:
        list(admin.delete_records([TopicPartition(topic, 8, 5)]).values())[0].result(30)
        check(False, "an offset past the end is refused")
    except Exception as error:
        check(error.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE,
              f"OFFSET_OUT_OF_RANGE: {error}")
    reader.close()

    admin.delete_topics([topic])[topic].result(30)
    check(topic not in admin.list_topics(timeout=10).topics, "deleted topic not listed")
    try:
        admin.delete_topics([topic])[topic].result(30)
        check(False, "a second delete fails")
    except Exception as error:
        check(error.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART,
              f"UNKNOWN_TOPIC_OR_PARTITION: {error}")


def main():
    client, bootstrap, topic, group = sys.argv[1:5]
    if client == "kafka-python":
        kafka_python(bootstrap, topic, group)
    elif client == "confluent":
        confluent(bootstrap, topic, group)
    else:
        sys.exit(f"unknown client {client}")
    print("ok", client)


if __name__ == "__main__":
    main()
