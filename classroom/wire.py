"""
classroom/wire.py: the grader and a student's worker talk through one socket in messages of
plain data (a 4-byte length, then JSON; no pickle). Plain values and numeric NumPy arrays cross
by value; anything else stays where it lives and crosses as a handle the other side may call.
The worker may lend any object, the grader only what it wraps in Exposed (the methods named
there). A side waiting for its reply serves the other's calls; the grader's time doing so is
the check's (within()).
"""

import base64
import contextlib
import json
import socket
import struct
import sys
import time

import numpy as np

MAX_MESSAGE = 16 * 1024 ** 2   # bytes: more is a broken or hostile worker (a check needs < 2)
NUMERIC = "biufc"              # the dtype kinds that cross by value (no objects, no strings)


class ProtocolError(Exception):
    """A message that is not what the protocol allows; the message says what."""


class Timeout(Exception):
    """The other side did not answer before the deadline."""


class Gone(Exception):
    """The other side closed the socket (its process ended)."""


class StudentError(Exception):
    """An exception raised on the other side, as one line: "TypeError: ... (file, line N)"."""

    def __init__(self, message, kind):
        super().__init__(message)
        self.message, self.kind = message, kind


class Exposed:
    """What the grader lends the worker: `target`, of which only `methods` may be called
    ("__call__" for target itself)."""

    def __init__(self, target, methods=("__call__",)):
        self.target, self.methods = target, tuple(methods)


class Remote:
    """An object that lives on the other side: call it, or call its methods."""

    def __init__(self, peer, ident):
        self._peer, self._ident = peer, ident

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: self._peer.call(self._ident, name, args, kwargs)

    def __call__(self, *args, **kwargs):
        return self._peer.call(self._ident, "__call__", args, kwargs)

    def __repr__(self):
        return f"<an object of the other process, #{self._ident}>"


def _array(kind, value):
    return {kind: value.dtype.str, "shape": list(value.shape),
            "data": base64.b64encode(np.ascontiguousarray(value).tobytes()).decode()}


def _from_array(message):
    dtype = np.dtype(message.get("$array") or message.get("$scalar"))
    shape = message.get("shape", [])
    if dtype.kind not in NUMERIC or dtype.hasobject or not isinstance(shape, list) or \
            not all(isinstance(n, int) and n >= 0 for n in shape):
        raise ProtocolError(f"an array of dtype {dtype} and shape {shape!r} is not allowed")
    data = base64.b64decode(message["data"], validate=True)
    if len(data) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise ProtocolError("an array whose data does not fill its shape")
    value = np.frombuffer(data, dtype).reshape(shape).copy()
    return value[()] if "$scalar" in message else value


class Peer:
    """One side of the socket. lends_anything: True on the worker's side (see the docstring)."""

    def __init__(self, sock, lends_anything, deadline=None):
        self.sock, self.lends_anything = sock, lends_anything
        self.objects, self.next_id = {}, 1
        self.deadline = deadline            # time.monotonic() after which a wait is a Timeout

    def describe(self, error):
        """An error raised serving a call, in one line (the worker's names the student's line)."""
        if isinstance(error, StudentError):
            return error.message
        return f"{type(error).__name__}: {error}"[:1500]

    # -- values ----------------------------------------------------------------------------

    def lend(self, value):
        ident = self.next_id
        self.objects[ident], self.next_id = value, ident + 1
        return {"$handle": ident}

    def encode(self, value, rngs):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, (list, tuple)):
            items = [self.encode(v, rngs) for v in value]
            return items if isinstance(value, list) else {"$tuple": items}
        if isinstance(value, dict):
            return {"$dict": [[self.encode(k, rngs), self.encode(v, rngs)]
                              for k, v in value.items()]}
        if isinstance(value, np.ndarray) and value.dtype.kind in NUMERIC:
            return _array("$array", value)
        if isinstance(value, np.generic) and value.dtype.kind in NUMERIC:
            return _array("$scalar", np.asarray(value))
        if isinstance(value, np.random.Generator) and not self.lends_anything:
            rngs.append(value)                        # its state comes back with the reply
            return {"$rng": json.dumps(value.bit_generator.state),
                    "kind": type(value.bit_generator).__name__}
        if isinstance(value, Remote) and value._peer is self:
            return {"$yours": value._ident}
        if self.lends_anything or isinstance(value, Exposed):
            return self.lend(value)
        raise TypeError(f"{type(value).__name__} cannot be sent to the worker")

    def decode(self, value, rngs):
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, list):
            return [self.decode(v, rngs) for v in value]
        if not isinstance(value, dict) or len(value) == 0:
            raise ProtocolError(f"unexpected {type(value).__name__}")
        if "$tuple" in value:
            return tuple(self.decode(v, rngs) for v in value["$tuple"])
        if "$dict" in value:
            return {self.decode(k, rngs): self.decode(v, rngs) for k, v in value["$dict"]}
        if "$array" in value or "$scalar" in value:
            return _from_array(value)
        if "$handle" in value:
            return Remote(self, int(value["$handle"]))
        if "$yours" in value:
            ident = value["$yours"]
            if ident not in self.objects:
                raise ProtocolError(f"no object #{ident} here")
            mine = self.objects[ident]
            return mine.target if isinstance(mine, Exposed) else mine
        if "$rng" in value and self.lends_anything:    # only the grader sends generators
            bit_generator = getattr(np.random, value["kind"])()
            bit_generator.state = json.loads(value["$rng"])
            generator = np.random.Generator(bit_generator)
            rngs.append(generator)
            return generator
        raise ProtocolError(f"unknown value {sorted(value)[:3]}")

    # -- messages --------------------------------------------------------------------------

    def send(self, message, data=None):
        data = data or json.dumps(message).encode()
        if len(data) > MAX_MESSAGE:
            raise ProtocolError(too_big(len(data)))
        if self.deadline is not None:
            self.sock.settimeout(max(0.001, self.deadline - time.monotonic()))
        try:
            self.sock.sendall(struct.pack(">I", len(data)) + data)
        except (socket.timeout, TimeoutError):
            raise Timeout() from None
        except OSError:
            raise Gone() from None

    def _read(self, n):
        chunks = []
        while n:
            if self.deadline is not None:
                left = self.deadline - time.monotonic()
                if left <= 0:
                    raise Timeout()
                self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(min(n, 1 << 20))
            except socket.timeout:
                raise Timeout() from None
            except OSError:
                chunk = b""
            if not chunk:
                raise Gone()
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def receive(self):
        (length,) = struct.unpack(">I", self._read(4))
        if length > MAX_MESSAGE:
            raise ProtocolError(too_big(length))
        try:
            message = json.loads(self._read(length))
        except (ValueError, RecursionError):
            raise ProtocolError("a message that is not JSON") from None
        if not isinstance(message, dict):
            raise ProtocolError("a message that is not an object")
        return message

    def call(self, ident, method, args, kwargs):
        """Call `method` of the other side's object `ident`; serve its calls meanwhile."""
        rngs = []
        self.send({"call": ident, "method": method, "args": self.encode(list(args), rngs),
                   "kwargs": self.encode(dict(kwargs), rngs)})
        while True:
            message = self.receive()
            if "call" in message:
                self.serve(message)
                continue
            try:
                if "error" in message:
                    error = message["error"]
                    if error.get("kind") == "NotImplementedError":
                        raise NotImplementedError(str(error.get("message", ""))[:2000])
                    raise StudentError(str(error.get("message", "?"))[:2000],
                                       str(error.get("kind", "?")))
                for generator, state in zip(rngs, message.get("rngs", [])):
                    generator.bit_generator.state = json.loads(state)
                return self.decode(message.get("value"), [])
            except (KeyError, TypeError, ValueError, RecursionError, AttributeError,
                    OverflowError, MemoryError) as e:
                raise ProtocolError(f"a reply the grader cannot read ({type(e).__name__})") \
                    from None

    def serve(self, message):
        """Answer one call of the other side: its value, or the error it raised."""
        rngs = []
        try:
            target = self.objects.get(message["call"], None)
            method = message.get("method")
            if target is None or not isinstance(method, str):
                raise ProtocolError(f"no object #{message['call']} here")
            if not self.lends_anything:               # the grader's side: Exposed only
                if not isinstance(target, Exposed) or method not in target.methods:
                    raise ProtocolError(f"{method} may not be called here")
                target = target.target
            args = self.decode(message.get("args", []), rngs)
            kwargs = self.decode(message.get("kwargs", {"$dict": []}), rngs)
            if not isinstance(kwargs, dict) or not all(isinstance(k, str) for k in kwargs):
                raise ProtocolError("keyword arguments that are not named")
            function = target if method == "__call__" else getattr(target, method)
            with within(self.deadline):             # the grader's side (the worker has none)
                value = function(*args, **kwargs)
            reply = {"value": self.encode(value, []),
                     "rngs": [json.dumps(g.bit_generator.state) for g in rngs]}
        except (Timeout, Gone):
            raise
        except BaseException as e:  # noqa: BLE001 (SystemExit too: a call never ends a process)
            reply = {"error": {"kind": type(e).__name__, "message": self.describe(e)}}
        try:
            data = json.dumps(reply).encode()
        except (ValueError, RecursionError) as e:
            data = json.dumps({"error": {"kind": type(e).__name__, "message": str(e)}}).encode()
        if len(data) > MAX_MESSAGE:                  # what came back is too big to send
            data = json.dumps({"error": {"kind": "ValueError", "message":
                                         f"ValueError: the value returned is {too_big(len(data))}"
                                         }}).encode()
        self.send(None, data)

    def serve_forever(self):
        while True:
            try:
                message = self.receive()
            except Gone:
                return
            if "call" in message:
                self.serve(message)


def too_big(length):
    return f"a message of {length >> 20} MB (the limit is {MAX_MESSAGE >> 20} MB)"


@contextlib.contextmanager
def within(deadline):
    """Run the block (the grader serving a worker's call) until `deadline` (time.monotonic(), or
    None) at most: past it, Timeout, at once or at the block's next function call (a profile
    hook of this thread; one long step of C, a huge power say, runs to its end)."""
    if deadline is None:
        yield
        return
    if time.monotonic() > deadline:
        raise Timeout()

    def guard(frame, event, arg):
        if time.monotonic() > deadline:
            raise Timeout()
    previous = sys.getprofile()
    sys.setprofile(guard)
    try:
        yield
    finally:
        sys.setprofile(previous)
