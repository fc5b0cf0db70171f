"""aioquic_get: an HTTP/3 client on aioquic (PyPI), for `cargo xtask http3`.

It sends -n GET requests for one URL at once over one QUIC connection (at most 100
streams open at a time, under the server's 128) and prints one JSON object per
response, as h3get (the Go client) does: status, protocol, headers, body length and
SHA-256, and with --body the body itself.
"""

import argparse
import asyncio
import hashlib
import json
import ssl
import sys
from urllib.parse import urlsplit

from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.h3.connection import H3_ALPN, H3Connection
from aioquic.h3.events import DataReceived, HeadersReceived
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import ConnectionTerminated, StreamReset

STREAMS_AT_ONCE = 100


class Response:
    def __init__(self, keep_body):
        self.headers = {}
        self.status = 0
        self.hash = hashlib.sha256()
        self.length = 0
        self.body = bytearray() if keep_body else None
        self.error = None
        self.done = asyncio.get_running_loop().create_future()

    def result(self):
        out = {
            "status": self.status,
            "proto": "HTTP/3.0",
            "headers": self.headers,
            "length": self.length,
            "sha256": self.hash.hexdigest(),
        }
        if self.body is not None:
            out["body"] = self.body.decode("utf-8", "replace")
        if self.error:
            out["error"] = self.error
        return out


class Client(QuicConnectionProtocol):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.h3 = H3Connection(self._quic)
        self.responses = {}

    def quic_event_received(self, event):
        if isinstance(event, StreamReset):
            self.end(event.stream_id, f"stream reset (code {event.error_code})")
        if isinstance(event, ConnectionTerminated):
            for stream_id in list(self.responses):
                self.end(stream_id, f"connection closed: {event.reason_phrase}")
        for h3_event in self.h3.handle_event(event):
            response = self.responses.get(getattr(h3_event, "stream_id", None))
            if response is None:
                continue
            if isinstance(h3_event, HeadersReceived):
                for name, value in h3_event.headers:
                    if name == b":status":
                        response.status = int(value)
                    else:
                        name = name.decode()
                        value = value.decode()
                        if name in response.headers:
                            response.headers[name] += ", " + value
                        else:
                            response.headers[name] = value
            elif isinstance(h3_event, DataReceived):
                response.hash.update(h3_event.data)
                response.length += len(h3_event.data)
                if response.body is not None:
                    response.body += h3_event.data
            if h3_event.stream_ended:
                self.end(h3_event.stream_id, None)

    def end(self, stream_id, error):
        response = self.responses.pop(stream_id, None)
        if response is not None and not response.done.done():
            response.error = error
            response.done.set_result(None)

    async def get(self, authority, path, headers, keep_body):
        stream_id = self._quic.get_next_available_stream_id()
        response = Response(keep_body)
        self.responses[stream_id] = response
        fields = [
            (b":method", b"GET"),
            (b":scheme", b"https"),
            (b":authority", authority.encode()),
            (b":path", path.encode()),
            (b"user-agent", b"aioquic"),
        ] + [(name.lower().encode(), value.encode()) for name, value in headers]
        self.h3.send_headers(stream_id, fields, end_stream=True)
        self.transmit()
        await response.done
        return response.result()


async def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--ca", required=True, help="PEM file of the CA to trust")
    parser.add_argument("--servername", default="localhost")
    parser.add_argument("-n", type=int, default=1, help="requests sent at once")
    parser.add_argument("--body", action="store_true", help="print each body")
    parser.add_argument("-H", action="append", default=[], help="'Name: value'")
    parser.add_argument("url")
    args = parser.parse_args()
    url = urlsplit(args.url)
    path = url.path or "/"
    if url.query:
        path += "?" + url.query
    headers = [tuple(part.strip() for part in h.split(":", 1)) for h in args.H]
    configuration = QuicConfiguration(is_client=True, alpn_protocols=H3_ALPN)
    configuration.load_verify_locations(args.ca)
    configuration.verify_mode = ssl.CERT_REQUIRED
    configuration.server_name = args.servername
    async with connect(
        url.hostname, url.port, configuration=configuration, create_protocol=Client
    ) as client:
        limit = asyncio.Semaphore(STREAMS_AT_ONCE)

        async def one():
            async with limit:
                return await client.get(url.netloc, path, headers, args.body)

        results = await asyncio.gather(*(one() for _ in range(args.n)))
    for result in results:
        print(json.dumps(result))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except Exception as error:  # the check names what failed
        print(f"aioquic_get: {error!r}", file=sys.stderr)
        sys.exit(1)
