"""kafka-python against a Tailstream cluster's Kafka listeners (run by cli/tests/kafka_clients.rs).

  clients.py produce BOOTSTRAP TOPIC COUNT [RATE]
      An idempotent producer (acks=all, gzip): COUNT records, keys cycling over 16 keys, values
      "KEY:SEQUENCE" in production order per key, at most RATE records/s. Prints one line per
      acknowledged record: "partition offset value".
  clients.py consume BOOTSTRAP TOPIC GROUP [MAX] [IDLE_S] [RATE]
      A subscribe() member of GROUP (auto commit, committed on rebalance and close) that prints
      "partition offset value" for every record it receives, at most RATE records/s (0: no
      limit), leaves after MAX records (0: no limit) or after IDLE_S seconds without one, and
      closes (commit, LeaveGroup).

  clients.py --sasl MECHANISM USER PASSWORD COMMAND ...
      The same, authenticating with SASL (SASL_PLAINTEXT) as USER.

  clients.py --ssl CA_FILE [--sasl ...] COMMAND ...
      The same over TLS, trusting CA_FILE (SSL, or SASL_SSL with --sasl).
"""
import logging
import sys
import time

from kafka import KafkaConsumer, KafkaProducer

# Connection settings every client gets (SASL, when asked for).
SECURITY = {}


def produce(bootstrap, topic, count, rate):
    producer = KafkaProducer(
        bootstrap_servers=bootstrap.split(","),
        acks="all",
        enable_idempotence=True,
        compression_type="gzip",
        linger_ms=5,
        request_timeout_ms=10000,
        delivery_timeout_ms=120000,
        **SECURITY,
    )
    started = time.monotonic()
    pending = []
    for i in range(count):
        key = str(i % 16)
        value = f"{key}:{i // 16}"
        pending.append((value, producer.send(topic, key=key.encode(), value=value.encode())))
        if rate > 0:
            due = started + (i + 1) / rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    producer.flush(timeout=120)
    for value, future in pending:
        meta = future.get(timeout=120)
        print(meta.partition, meta.offset, value)
    producer.close()


def consume(bootstrap, topic, group, limit, idle_s, rate):
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap.split(","),
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        auto_commit_interval_ms=500,
        session_timeout_ms=10000,
        heartbeat_interval_ms=300,
        consumer_timeout_ms=int(idle_s * 1000),
        **SECURITY,
    )
    received = 0
    started = time.monotonic()
    for message in consumer:
        print(message.partition, message.offset, message.value.decode(), flush=True)
        received += 1
        if rate > 0:
            delay = started + received / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
        if limit and received >= limit:
            break
    consumer.close()


def main():
    # Warnings, and the group's joins and rebalances, go to stderr: a test shows them when it
    # fails.
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.WARNING,
        format="%(relativeCreated)d ms %(name)s %(levelname)s %(message)s",
    )
    logging.getLogger("kafka.coordinator").setLevel(logging.INFO)
    ssl = False
    if sys.argv[1] == "--ssl":
        ssl = True
        SECURITY.update(security_protocol="SSL", ssl_cafile=sys.argv[2])
        del sys.argv[1:3]
    if sys.argv[1] == "--sasl":
        SECURITY.update(
            security_protocol="SASL_SSL" if ssl else "SASL_PLAINTEXT",
            sasl_mechanism=sys.argv[2],
            sasl_plain_username=sys.argv[3],
            sasl_plain_password=sys.argv[4],
        )
        del sys.argv[1:5]
    command, bootstrap, topic = sys.argv[1], sys.argv[2], sys.argv[3]
    if command == "produce":
        rate = int(sys.argv[5]) if len(sys.argv) > 5 else 0
        produce(bootstrap, topic, int(sys.argv[4]), rate)
    elif command == "consume":
        limit = int(sys.argv[5]) if len(sys.argv) > 5 else 0
        idle = float(sys.argv[6]) if len(sys.argv) > 6 else 5.0
        rate = int(sys.argv[7]) if len(sys.argv) > 7 else 0
        consume(bootstrap, topic, sys.argv[4], limit, idle, rate)
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
