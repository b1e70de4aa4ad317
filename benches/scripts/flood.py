"""Floods listeners with connections from many loopback addresses, as the issue 23 probe did:
COUNT connections per port, spread over source addresses 127.0.0.2-254 (so no per-address cap
stops them), each sending the start of a request (a Kafka length prefix and part of a header,
or a native frame's first bytes) and then nothing. Holds them HOLD seconds, then closes all.
Bounded: at most COUNT per port, every step with a timeout. Loopback only.
Usage: flood.py HOLD_S COUNT HOST:PORT [HOST:PORT...]"""
import asyncio, resource, sys

async def one(host, port, source, opened):
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(host, port, local_addr=(source, 0)), 5)
    except Exception:
        return None
    try:
        # A request's first bytes: a 4-byte big-endian length (64 KiB) and a little more.
        writer.write(b"\x00\x01\x00\x00" + b"\x00\x12\x00\x03" + b"\x00" * 24)
        await asyncio.wait_for(writer.drain(), 5)
    except Exception:
        pass
    opened.append(1)
    return writer

async def main():
    hold, count = float(sys.argv[1]), int(sys.argv[2])
    targets = [(a.rsplit(":", 1)[0], int(a.rsplit(":", 1)[1])) for a in sys.argv[3:]]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    opened = []
    tasks = []
    for host, port in targets:
        for i in range(count):
            source = f"127.0.0.{2 + i % 253}"
            tasks.append(one(host, port, source, opened))
    writers = []
    for chunk in range(0, len(tasks), 200):
        writers += await asyncio.gather(*tasks[chunk:chunk + 200])
    print(f"flood: {len(opened)} connections open on {len(targets)} ports", flush=True)
    await asyncio.sleep(hold)
    for w in writers:
        if w is not None:
            w.close()
    print("flood: closed", flush=True)

asyncio.run(main())
