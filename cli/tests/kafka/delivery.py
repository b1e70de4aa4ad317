"""confluent-kafka (librdkafka) against a Tailstream cluster (run by cli/tests/kafka_delivery.rs).

  delivery.py produce BOOTSTRAP TOPIC COUNT RATE MESSAGE_TIMEOUT_MS
      An idempotent producer (acks=all, lz4, linger 5 ms, message.timeout.ms as given) sends
      COUNT records "v-N" (keys cycling over 32 keys) at RATE records/s, then flushes.
      Prints one line per delivery report: "ok PARTITION OFFSET VALUE SECONDS" (seconds since
      the start, when the report came) or "failed VALUE ERROR", "fatal ERROR" for a fatal
      producer error (after which it stops producing), and "unsettled N" last.
  delivery.py consume BOOTSTRAP TOPIC GROUP IDLE_S
      A subscribe() member of GROUP (auto commit) that prints "PARTITION OFFSET VALUE" for every
      record it receives and leaves once it received some and then none for IDLE_S seconds
      (at most 120 s in all); an error other than end-of-partition is printed "error NAME".
  delivery.py transactional BOOTSTRAP
      A transactional producer's init_transactions(30 s): prints
      "refused SECONDS CODE fatal=BOOL retriable=BOOL" or "initialized SECONDS".

  delivery.py --set KEY=VALUE [--set ...] COMMAND ...
      The same with these client settings added (e.g. security.protocol=SASL_SSL).
"""
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer

# Settings every client gets (--set).
EXTRA = {}


def produce(bootstrap, topic, count, rate, message_timeout_ms):
    fatal = []

    def on_error(error):
        if error.fatal():
            fatal.append(error)

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "acks": "all",
        "compression.type": "lz4",
        "linger.ms": 5,
        "message.timeout.ms": message_timeout_ms,
        "error_cb": on_error,
        **EXTRA,
    })
    lines = []
    started = time.monotonic()

    def report(error, message):
        value = message.value().decode()
        if error is None:
            at = time.monotonic() - started
            lines.append(f"ok {message.partition()} {message.offset()} {value} {at:.3f}")
        else:
            lines.append(f"failed {value} {error.name()}")

    for i in range(count):
        if fatal:
            break
        key = f"k{i % 32}".encode()
        while True:
            try:
                producer.produce(topic, key=key, value=f"v-{i}".encode(), on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        if rate > 0:
            delay = started + (i + 1) / rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
    # Every message either is delivered or times out within message.timeout.ms of its send.
    producer.flush(60 + message_timeout_ms / 1000)
    for line in lines:
        print(line)
    for error in fatal:
        print(f"fatal {error.name()} {error.str()}")
    print(f"unsettled {len(producer)}")


def consume(bootstrap, topic, group, idle_s):
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10000,
        **EXTRA,
    })
    consumer.subscribe([topic])
    started = time.monotonic()
    last = None
    while time.monotonic() - started < 120:
        if last is not None and time.monotonic() - last > idle_s:
            break
        message = consumer.poll(0.2)
        if message is None:
            continue
        if message.error() is not None:
            if message.error().code() != KafkaError._PARTITION_EOF:
                print(f"error {message.error().name()}", flush=True)
            continue
        last = time.monotonic()
        print(message.partition(), message.offset(), message.value().decode(), flush=True)
    consumer.close()


def transactional(bootstrap):
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "refused"})
    started = time.monotonic()
    try:
        producer.init_transactions(30)
        print(f"initialized {time.monotonic() - started:.2f}")
    except KafkaException as e:
        error = e.args[0]
        print(f"refused {time.monotonic() - started:.2f} {error.name()} "
              f"fatal={error.fatal()} retriable={error.retriable()}")


def main():
    while sys.argv[1] == "--set":
        key, value = sys.argv[2].split("=", 1)
        EXTRA[key] = value
        del sys.argv[1:3]
    command = sys.argv[1]
    if command == "produce":
        bootstrap, topic, count, rate, timeout = sys.argv[2:7]
        produce(bootstrap, topic, int(count), int(rate), int(timeout))
    elif command == "consume":
        bootstrap, topic, group, idle = sys.argv[2:6]
        consume(bootstrap, topic, group, float(idle))
    elif command == "transactional":
        transactional(sys.argv[2])
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main()
