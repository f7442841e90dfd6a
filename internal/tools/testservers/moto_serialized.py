"""Runs moto's server with its application serialized behind one lock.

moto_server answers on many threads, but moto's DynamoDB backend reads,
checks a condition and writes an item without a lock: two concurrent
conditional UpdateItem calls can both pass (measured: 1,026 admitted for a
limit of 1,000), and a cancelled TransactWriteItems restores a copy of the
table taken before it started, erasing concurrent writes. Real DynamoDB is
atomic per item, so for tests of exactness we run moto's WSGI application
one request at a time, while keeping HTTP/1.1 keep-alive connections on
threads.

usage: python3 moto_serialized.py HOST PORT
"""
import logging
import sys
import threading

from werkzeug.serving import WSGIRequestHandler, run_simple
from moto.server import DomainDispatcherApplication, create_backend_app


def serialized(app):
    lock = threading.Lock()

    def wrapped(environ, start_response):
        with lock:
            # Consume the body inside the lock: moto may build it lazily.
            return [b"".join(app(environ, start_response))]

    return wrapped


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    WSGIRequestHandler.protocol_version = "HTTP/1.1"
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, serialized(app), threaded=True)


if __name__ == "__main__":
    main()
