#!/usr/bin/env python3
"""A TCP relay for examples and tests that need a server to go away
(standard library only): PostgreSQL's protocol is not HTTP, so
scripts/faultproxy.py cannot stand in front of it.

    python3 scripts/tcpproxy.py --upstream HOST:PORT [--port 0]

Listens on 127.0.0.1 (--port 0 picks a free port), prints the port as the
first line on stdout, and relays every connection to the upstream, bytes
unchanged, both ways. On SIGTERM or SIGINT it closes every connection and
exits: to a client the server has gone (a connection refused from then on).
"""
import argparse
import signal
import socket
import sys
import threading

open_sockets = set()      # closed by stop(); a relay's leave it as it ends
lock = threading.Lock()


def pipe(source, sink):
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with lock:
            if source in open_sockets:
                open_sockets.discard(source)
                source.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="HOST:PORT")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    host, _, port = args.upstream.rpartition(":")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", args.port))
    listener.listen(64)
    def stop(*_):
        with lock:
            for s in list(open_sockets) + [listener]:
                try:
                    s.close()
                except OSError:
                    pass
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(listener.getsockname()[1], flush=True)
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return
        try:
            server = socket.create_connection((host, int(port)))
        except OSError:
            client.close()
            continue
        with lock:
            open_sockets.update((client, server))
        for a, b in ((client, server), (server, client)):
            threading.Thread(target=pipe, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
