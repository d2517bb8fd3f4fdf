"""A small OpenAI-compatible server for a local GGUF model: what llm_icl's openai backend is tested against.

    python -m tests.systems.llm_server --model smollm2 --port 8080 [--no-logprobs]

Standard library HTTP (``http.server``), one model call at a time, three routes:

* ``GET /v1/models``: the served model's name;
* ``POST /v1/completions``: ``prompt`` (a text or a list), ``max_tokens`` (greedy, at most 32),
  ``echo`` and ``logprobs`` (with echo: every prompt token's log-probability and character
  offset, as the OpenAI completions API returns them; the first token's is null);
* ``POST /v1/chat/completions``: ChatML turns; with ``response_format`` a JSON schema whose
  ``label`` property is an ``enum``, the answer is the enum value the model scores highest
  after the opened assistant turn (constrained choice), written ``{"label": ...}``; without
  it, greedy text.

``--no-logprobs`` makes it refuse ``logprobs`` with HTTP 400, as servers without them do, so
the client's fallback to constrained choice can be tested against a real server. It is a test
and demonstration server (no authentication beyond an optional ``--api-key``, no batching
across requests); serve a real deployment with llama.cpp's or vLLM's server.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ocrr.systems.llm.backends import LocalScorer, load_local_model, torch_threads

MAX_NEW_TOKENS = 32


class ModelHost:
    """The model behind the routes: prompt log-probabilities, greedy tokens, constrained choice."""

    def __init__(self, model: str, threads: int = 1):
        self.scorer = LocalScorer(model, threads)
        self.lock = threading.Lock()  # one request at a time: the model and tokenizer are shared

    def _loaded(self):
        return load_local_model(self.scorer.ref)

    def echo_logprobs(self, text: str) -> dict:
        """Each token of ``text`` with its log-probability given the ones before, and its offset."""
        import torch

        tokenizer, model = self._loaded()
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        ids, spans = list(encoded["input_ids"]), list(encoded["offset_mapping"])
        values: list[float | None] = [None]
        if len(ids) > 1:
            with torch.inference_mode(), torch_threads(self.scorer.threads):
                logp = torch.log_softmax(model(input_ids=torch.tensor([ids])).logits[0].float(), dim=-1)
            values += [float(logp[i - 1, ids[i]]) for i in range(1, len(ids))]
        return {
            "tokens": [text[a:b] for a, b in spans],
            "token_logprobs": values,
            "text_offset": [int(a) for a, _ in spans],
            "top_logprobs": None,
        }

    def generate(self, text: str, max_tokens: int) -> str:
        import torch

        tokenizer, model = self._loaded()
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        new: list[int] = []
        with torch.inference_mode(), torch_threads(self.scorer.threads):
            for _ in range(min(max_tokens, MAX_NEW_TOKENS)):
                nxt = int(model(input_ids=torch.tensor([ids + new]), logits_to_keep=1).logits[0, -1].argmax())
                if nxt == tokenizer.eos_token_id:
                    break
                new.append(nxt)
        return tokenizer.decode(new)

    def choose(self, text: str, options: Sequence[str]) -> str:
        scores = self.scorer.score(text, list(options)).logprobs
        return options[max(range(len(options)), key=lambda i: scores[i])]

    def count(self, text: str) -> int:
        return self.scorer.count_tokens(text)


def chatml(messages: Sequence[dict]) -> str:
    turns = "".join(f"<|im_start|>{m.get('role', 'user')}\n{m.get('content', '')}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


def label_enum(response_format: Any) -> list[str] | None:
    """The allowed labels of a ``json_schema`` response format ({"label": {"enum": [...]}})."""
    try:
        enum = response_format["json_schema"]["schema"]["properties"]["label"]["enum"]
    except (KeyError, TypeError):
        return None
    return [str(x) for x in enum] if enum else None


def make_handler(host: ModelHost, name: str, logprobs: bool, api_key: str | None):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read stdout
            pass

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            self._send(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def _authorised(self) -> bool:
            if api_key and self.headers.get("Authorization") != f"Bearer {api_key}":
                self._error(401, "invalid API key")
                return False
            return True

        def do_GET(self) -> None:
            if not self._authorised():
                return
            if self.path.rstrip("/") == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "ocrr"}]})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:
            if not self._authorised():
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            except json.JSONDecodeError:
                return self._error(400, "the body is not JSON")
            route = self.path.rstrip("/")
            if route not in ("/v1/completions", "/v1/chat/completions"):
                return self._error(404, f"no route {self.path}")
            with host.lock:
                self._completions(body) if route == "/v1/completions" else self._chat(body)

        def _completions(self, body: dict) -> None:
            prompts = body.get("prompt", "")
            prompts = [prompts] if isinstance(prompts, str) else list(prompts)
            wants_logprobs = body.get("logprobs") is not None
            if wants_logprobs and not logprobs:
                return self._error(400, "this server does not return logprobs")
            max_tokens = int(body.get("max_tokens", 16))
            choices, used = [], 0
            for i, prompt in enumerate(prompts):
                text = host.generate(prompt, max_tokens) if max_tokens > 0 else ""
                used += host.count(prompt)
                choice: dict[str, Any] = {"index": i, "text": (prompt if body.get("echo") else "") + text}
                choice["logprobs"] = host.echo_logprobs(prompt) if wants_logprobs and body.get("echo") else None
                choice["finish_reason"] = "length"
                choices.append(choice)
            usage = {"prompt_tokens": used, "completion_tokens": 0, "total_tokens": used}
            self._send(200, {"object": "text_completion", "model": name, "choices": choices, "usage": usage})

        def _chat(self, body: dict) -> None:
            prompt = chatml(body.get("messages") or [])
            options = label_enum(body.get("response_format"))
            if options is not None:
                content = json.dumps({"label": host.choose(prompt, options)})
            else:
                content = host.generate(prompt, int(body.get("max_tokens", 16)))
            used = host.count(prompt)
            message = {"role": "assistant", "content": content}
            self._send(
                200,
                {
                    "object": "chat.completion",
                    "model": name,
                    "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": used, "completion_tokens": 0, "total_tokens": used},
                },
            )

    return Handler


def make_server(
    model: str = "smollm2",
    host: str = "127.0.0.1",
    port: int = 0,
    name: str | None = None,
    logprobs: bool = True,
    api_key: str | None = None,
    threads: int = 1,
) -> ThreadingHTTPServer:
    """A server bound to (host, port) (0: a free port; see ``server.server_address``), not started."""
    handler = make_handler(ModelHost(model, threads), name or model, logprobs, api_key)
    return ThreadingHTTPServer((host, port), handler)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve a local GGUF model over an OpenAI-compatible API.")
    parser.add_argument("--model", default="smollm2", help="smollm2 (packaged), tiny-random, or a .gguf path")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--name", default=None, help="the model name clients send (default: --model)")
    parser.add_argument("--no-logprobs", action="store_true", help="refuse logprobs, like servers without them")
    parser.add_argument("--api-key", default=None, help="require this bearer token")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    server = make_server(args.model, args.host, args.port, args.name, not args.no_logprobs, args.api_key, args.threads)
    print(f"serving {args.name or args.model} on http://{args.host}:{server.server_address[1]}/v1", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
