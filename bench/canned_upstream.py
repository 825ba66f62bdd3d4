"""A wire-level OpenAI upstream that answers every chat call with the same bytes in one write:
a JSON completion, or (for `"stream": true`) a chunked SSE stream of 12 words and a usage chunk;
404 to anything else.

    .venv/bin/python -m bench.canned_upstream --port 18000

For counting the gateway's work (bench/request_budget.py): it runs in its own process, so none of
its work is counted, and one write per reply means the gateway reads each reply in one piece,
whatever the machine's load, so the count does not depend on timing. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import socket
import threading

WORDS = ("The", " quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog")
NUM_WORDS = 12
USAGE = {"prompt_tokens": 6005, "completion_tokens": NUM_WORDS, "total_tokens": 6017}
NOT_FOUND = b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
HEAD = {"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "gpt-4o-mini"}


def completion_bytes() -> bytes:
    text = "".join(WORDS[i % len(WORDS)] for i in range(NUM_WORDS))
    message = {"role": "assistant", "content": text}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    body = json.dumps({**HEAD, "choices": [choice], "usage": USAGE}).encode()
    head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
    return head + b"content-length: %d\r\n\r\n" % len(body) + body


def stream_bytes() -> bytes:
    """Role, 12 words, finish, usage, `[DONE]`: each SSE event one HTTP chunk, as OpenAI sends."""
    head = {**HEAD, "object": "chat.completion.chunk"}

    def chunk(delta: dict[str, str], finish: str | None = None) -> dict[str, object]:
        return {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": WORDS[i % len(WORDS)]}) for i in range(NUM_WORDS)]
    events += [chunk({}, "stop"), {**head, "choices": [], "usage": USAGE}]
    lines = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
    out = [b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"]
    out.append(b"transfer-encoding: chunked\r\n\r\n")
    out += [b"%x\r\n%s\r\n" % (len(line), line) for line in lines]
    return b"".join([*out, b"0\r\n\r\n"])


def serve_connection(conn: socket.socket, replies: tuple[bytes, bytes]) -> None:
    """Keep-alive: request after request on one connection, each answered in one `sendall`."""
    buf = b""
    with conn:
        while True:
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            head, _, buf = buf.partition(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            while len(buf) < length:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            body, buf = buf[:length], buf[length:]
            if not head.startswith(b"POST /v1/chat/completions "):
                conn.sendall(
                    NOT_FOUND
                )  # no tokenizer, no metrics: the gateway counts with tiktoken
            elif b'"stream":true' in body or b'"stream": true' in body:
                conn.sendall(replies[1])
            else:
                conn.sendall(replies[0])


def serve(port: int) -> None:
    replies = (completion_bytes(), stream_bytes())
    with socket.create_server(("127.0.0.1", port)) as server:
        while True:
            conn, _ = server.accept()
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=serve_connection, args=(conn, replies), daemon=True).start()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    serve(ap.parse_args().port)


if __name__ == "__main__":
    main()
