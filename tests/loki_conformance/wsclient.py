"""A WebSocket client small enough for one purpose: read the text messages of Loki's
`/loki/api/v1/tail` for a while (RFC 6455: the opening handshake, unmasked server frames,
fragmented messages, ping answered with pong, close). Standard library only."""

import base64
import os
import socket
import struct
import time


class HandshakeRefused(Exception):
    def __init__(self, status, body):
        super().__init__(f"HTTP {status}: {body!r}")
        self.status, self.body = status, body


def _send_frame(sock, opcode, payload=b""):
    """A client frame: FIN, masked, as RFC 6455 requires of a client."""
    mask = os.urandom(4)
    header = bytes([0x80 | opcode])
    n = len(payload)
    if n < 126:
        header += bytes([0x80 | n])
    elif n < 65536:
        header += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        header += bytes([0x80 | 127]) + struct.pack("!Q", n)
    masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    sock.sendall(header + mask + masked)


class _Reader:
    def __init__(self, sock, buffered):
        self.sock, self.buf = sock, bytearray(buffered)

    def exactly(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed")
            self.buf += chunk
        out, self.buf = bytes(self.buf[:n]), self.buf[n:]
        return out


def read_messages(host, port, path, headers, seconds, on_open=None):
    """Opens the WebSocket at `path`, calls `on_open()` once it is open, and returns the text
    messages received within `seconds` (each decoded as UTF-8). Raises HandshakeRefused when the
    server answers the upgrade with anything but 101."""
    sock = socket.create_connection((host, port), timeout=10)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        lines = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(65536)
            if not chunk:
                break
            head += chunk
        head, _, rest = head.partition(b"\r\n\r\n")
        status_line = head.split(b"\r\n", 1)[0].decode(errors="replace")
        status = int(status_line.split()[1]) if len(status_line.split()) > 1 else 0
        if status != 101:
            sock.settimeout(2)
            try:
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    rest += chunk
            except OSError:
                pass
            raise HandshakeRefused(status, rest.decode(errors="replace").strip())
        if on_open:
            on_open()
        reader = _Reader(sock, rest)
        deadline = time.monotonic() + seconds
        messages, fragments = [], []
        try:
            while True:
                b0, b1 = reader.exactly(2, deadline)
                opcode, n = b0 & 0x0F, b1 & 0x7F
                if n == 126:
                    (n,) = struct.unpack("!H", reader.exactly(2, deadline))
                elif n == 127:
                    (n,) = struct.unpack("!Q", reader.exactly(8, deadline))
                mask = reader.exactly(4, deadline) if b1 & 0x80 else None
                payload = reader.exactly(n, deadline)
                if mask:
                    payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
                if opcode in (0x1, 0x2, 0x0):
                    fragments.append(payload)
                    if b0 & 0x80:
                        messages.append(b"".join(fragments).decode())
                        fragments = []
                elif opcode == 0x9:
                    _send_frame(sock, 0xA, payload)
                elif opcode == 0x8:
                    break
        except (TimeoutError, socket.timeout, ConnectionError):
            pass
        try:
            _send_frame(sock, 0x8, struct.pack("!H", 1000))
        except OSError:
            pass
        return messages
    finally:
        sock.close()
