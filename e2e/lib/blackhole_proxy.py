#!/usr/bin/env python3
"""A TCP proxy that can turn into a blackhole, for the end-to-end tests (e2e/cluster proxy).

    blackhole_proxy.py LISTEN_PORT TARGET_HOST TARGET_PORT STATE_DIR

Forwards every connection accepted on 127.0.0.1:LISTEN_PORT to TARGET_HOST:TARGET_PORT, bytes
unchanged (TLS passes through). SIGUSR1 turns it into a blackhole, the way a load balancer that
lost its connection table or a half-open TCP connection behaves: every connection open at that
moment, and every one accepted while it lasts, stays open and silent for good (nothing is
forwarded either way, nothing is closed). SIGUSR2 ends the blackhole for connections accepted
from then on; the frozen ones stay frozen until their peer closes them. STATE_DIR/proxy.state
says "forwarding" or "blackhole".
"""

import asyncio
import os
import signal
import sys

CHUNK = 1 << 16


class Proxy:
    def __init__(self, target_host, target_port, state_path):
        self.target = (target_host, target_port)
        self.state_path = state_path
        self.generation = 0  # bumped by each blackhole: connections of older generations freeze
        self.blackhole = False
        self.write_state()

    def write_state(self):
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as f:
            f.write("blackhole\n" if self.blackhole else "forwarding\n")
        os.replace(tmp, self.state_path)

    def start_blackhole(self):
        self.blackhole = True
        self.generation += 1
        self.write_state()

    def end_blackhole(self):
        self.blackhole = False
        self.write_state()

    async def pipe(self, reader, writer, generation):
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if generation != self.generation:
                    await asyncio.Event().wait()  # frozen: never forward, never close
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except OSError:
                pass

    async def handle(self, client_reader, client_writer):
        if self.blackhole:
            await asyncio.Event().wait()  # accepted into the blackhole: silent for good
        generation = self.generation
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(
            self.pipe(client_reader, up_writer, generation),
            self.pipe(up_reader, client_writer, generation),
        )


async def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    listen_port, target_host, target_port, state_dir = (
        int(sys.argv[1]),
        sys.argv[2],
        int(sys.argv[3]),
        sys.argv[4],
    )
    proxy = Proxy(target_host, target_port, os.path.join(state_dir, "proxy.state"))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, proxy.start_blackhole)
    loop.add_signal_handler(signal.SIGUSR2, proxy.end_blackhole)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    server = await asyncio.start_server(proxy.handle, "127.0.0.1", listen_port)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    asyncio.run(main())
