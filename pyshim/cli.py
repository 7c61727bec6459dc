"""``python -m pyshim``: chat, the demo agent, the model catalogue, and the OpenAI-compatible server."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from . import models
from .agent import Agent, Event
from .demo_tools import DEMO_TOOLS
from .errors import ContextFull, ShimError
from .model import Delta, Model

DEMO_SYSTEM = (
    "Answer the user's questions. To get facts, call tools. Once you have the tool results, "
    "respond with a short plain-text answer that states the results."
)
DEMO_TASK = "Use the tools to compute 12.5 times 3, and to convert 37.5 km to miles, then tell me both results."


def _reuse_line(r: Mapping[str, Any]) -> str:
    return (
        f"prompt {r['n_prompt']} tok, reused {r['n_reused']}, prefill {r['ms_prefill']:.0f} ms, "
        f"decoded {r['n_decoded']} in {r['ms_decode']:.0f} ms"
    )


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "list":
        print(f"{'model':32} {'architecture':48} {'size':>9}  {'chat template':16} {'tools':5}  status")
        for name, e in models.CATALOGUE.items():
            mark = models.status(name)
            if mark == "damaged":
                mark = f"damaged: `python -m pyshim models fetch {name}` repairs it"
            default = " (default)" if name == models.DEFAULT else ""
            template = "own" if e.template == "model" else e.template
            tools = "yes" if e.tools else "no"
            print(f"{name:32} {e.architecture:48} {e.size / 1e6:6.0f} MB  {template:16} {tools:5}  {mark}{default}")
        return 0
    for name in args.names or [models.DEFAULT]:
        print(models.path(name))
    return 0


CHAT_HELP = """commands:
  /help    this list
  /clear   forget the conversation (the --system message stays)
  /exit    quit (so do /quit and Ctrl-D)
Ctrl-C stops a reply; the conversation so far stays."""


def _show(delta: Delta) -> None:
    if "prompt_progress" in delta:
        p = delta["prompt_progress"]
        end = "\n" if p["processed"] == p["total"] else ""
        print(f"\r[reading prompt {p['processed']}/{p['total']} tokens]", end=end, file=sys.stderr, flush=True)
    print(delta.get("content", ""), end="", flush=True)


def _drop_oldest_turn(messages: list[dict[str, Any]]) -> bool:
    """Remove the oldest exchange after the system message (its user message and every message
    up to the next user message); False when only the last user message is left."""
    first = 1 if messages and messages[0].get("role") == "system" else 0
    users = [i for i, m in enumerate(messages) if i >= first and m.get("role") == "user"]
    if len(users) < 2:
        return False
    del messages[users[0] : users[1]]
    return True


def _reply(m: Model, messages: list[dict[str, Any]], options: dict[str, Any]) -> Any:
    """One turn, dropping the oldest turns (and saying so) while the conversation does not fit
    the context; None when even the last message alone does not."""
    while True:
        try:
            return m.generate(messages, on_delta=_show, **options)
        except ContextFull:
            if not _drop_oldest_turn(messages):
                print(
                    "pyshim: this message alone does not fit the context; send a shorter one, or start "
                    "again with a larger --n-ctx",
                    file=sys.stderr,
                )
                messages.pop()
                return None
            print("[the context is full: the oldest turn was dropped]", file=sys.stderr)


def _command(text: str, messages: list[dict[str, Any]], system: int) -> bool | None:
    """A /command: True to quit, False once handled, None when the text is no command."""
    word = text.strip().lower()
    if not word.startswith("/"):
        return None
    if word in ("/exit", "/quit"):
        return True
    if word == "/clear":
        del messages[system:]
        print("[conversation cleared]", file=sys.stderr)
    elif word == "/help":
        print(CHAT_HELP, file=sys.stderr)
    else:
        print(f"unknown command {word}; /help lists them (start a message with a space to send it)", file=sys.stderr)
    return False


def cmd_chat(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"max_tokens": args.max_tokens}
    if args.temperature is not None:
        options["temperature"] = args.temperature
    with Model(args.model, n_ctx=args.n_ctx) as m:
        messages: list[dict[str, Any]] = [{"role": "system", "content": args.system}] if args.system else []
        prompts = [args.prompt] if args.prompt else None
        if prompts is None:
            print(f"chatting with {args.model}: /help for commands, Ctrl-D or /exit to quit", file=sys.stderr)
        while True:
            if prompts is not None:
                if not prompts:
                    return 0
                text = prompts.pop()
            else:
                try:
                    text = input("> ")
                except EOFError:
                    print()
                    return 0
                if not text.strip():
                    continue
                done = _command(text, messages, 1 if args.system else 0)
                if done is not None:
                    if done:
                        return 0
                    continue
            messages.append({"role": "user", "content": text})
            try:
                r = _reply(m, messages, options)
            except KeyboardInterrupt:  # the reply stops; the model and the conversation so far stay
                print("\n[stopped]", file=sys.stderr)
                messages.pop()
                if prompts is not None:
                    return 130
                continue
            print()
            if r is None:
                if prompts is not None:
                    return 1
                continue
            if r.get("truncated"):
                print("[the context filled up: the reply was cut; older turns go from the next one]", file=sys.stderr)
                _drop_oldest_turn(messages)
            elif r["finish_reason"] == "length":
                print(f"[cut at --max-tokens {args.max_tokens}]", file=sys.stderr)
            if args.verbose:
                print(f"[{_reuse_line(r)}]", file=sys.stderr)
            messages.append(r["message"])


def cmd_demo(args: argparse.Namespace) -> int:
    turn = 0

    def on_event(e: Event) -> None:
        nonlocal turn
        if e["type"] == "turn":
            turn += 1
            print(f"  [turn {turn}: {_reuse_line(e['result'])}]")
        elif e["type"] == "tool_call":
            print(f"→ {e['name']}({e['arguments']})")
        elif e["type"] == "tool_result":
            print(f"← {e['content']}")
        elif e["type"] == "plan":
            label = "still needed" if e.get("revised") else "plan"
            print(f"{label}: " + (" | ".join(e["steps"]) or "nothing"))
        elif e["type"] == "nudge":
            print(f"(asking for the answer: {e['content']})")

    print(f"model: {args.model}\ntask: {args.task}\n")
    with Model(args.model, n_ctx=args.n_ctx) as m:
        agent = Agent(
            m,
            DEMO_TOOLS,
            system=DEMO_SYSTEM,
            max_steps=args.max_steps,
            plan=args.plan,
            on_event=on_event,
            temperature=0,
            max_tokens=160,
        )
        result = agent.run(args.task)
    print(f"\nanswer ({result.stopped}): {result.content}")
    if result.error:
        print(f"pyshim: {result.error}", file=sys.stderr)
    if args.json:
        print(json.dumps(result.messages, indent=2, ensure_ascii=False))
    return 0 if result.stopped == "answer" and result.tool_calls else 1


# el_open's settings as `serve` flags: (flag, type, help). Only flags given reach el_open,
# so the library's own defaults apply to the rest.
OPEN_FLAGS: list[tuple[str, Any, str]] = [
    ("--n-ctx", int, "context length per slot, in tokens (library default 4096; 0 = the model's own)"),
    (
        "--n-seq",
        int,
        "conversations kept warm at once (slots), each with n_ctx tokens of cache; also how many "
        "calls run at once, their decode steps batched (default 1)",
    ),
    ("--n-batch", int, "prompt tokens per decode (default 512)"),
    ("--n-threads", int, "CPU threads (default: physical cores)"),
    ("--n-gpu-layers", int, "layers offloaded to a GPU backend (default 0)"),
    ("--seed", int, "default sampling seed"),
    ("--temperature", float, "default temperature (a request's own wins)"),
    ("--top-p", float, "default top_p"),
    ("--top-k", int, "default top_k"),
    ("--min-p", float, "default min_p"),
    ("--max-tokens", int, "default generation limit (default 512)"),
    ("--flash-attn", str, "auto | on | off"),
    ("--n-checkpoints", int, "saved cache states per conversation (default 8)"),
    ("--state-cache-mib", int, "host memory for conversations evicted from their slot (default 256)"),
    ("--speculative", str, "off | ngram-simple: draft tokens from n-grams of the context (default off; el_shim.h)"),
    ("--embd-ctx", int, "tokens one embedding input may have (default 512)"),
    ("--embd-pooling", str, "auto | mean | cls | last: how embeddings are pooled (default auto)"),
]


def add_serve_parser(sub: Any) -> None:
    ps = sub.add_parser(
        "serve",
        help="serve a model over OpenAI's chat-completions HTTP API",
        description="Serve MODEL at http://HOST:PORT/v1 (POST /v1/chat/completions, GET /v1/models, GET /health). "
        "Without an API key the server is unauthenticated: anyone who can reach the port can use it.",
    )
    ps.add_argument(
        "model",
        nargs="?",
        default=models.DEFAULT,
        help="catalogue name, path to a .gguf file, or hf://org/repo/file.gguf",
    )
    ps.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    ps.add_argument("--port", type=int, default=8000)
    ps.add_argument("--name", help="the model id clients use (default: the catalogue name or the file's stem)")
    ps.add_argument(
        "--alias",
        action="append",
        default=[],
        help="another model id requests may give (repeatable; any other id gets 404 listing the served ones)",
    )
    ps.add_argument(
        "--api-key",
        action="append",
        default=[],
        help="accept Authorization: Bearer KEY (repeatable: one tenant per key, whose calls never share "
        "cached state with another's; default $PYSHIM_API_KEY; none: unauthenticated)",
    )
    ps.add_argument("--api-key-file", help="accept the keys in this file, one per line (# comments)")
    ps.add_argument("--max-request-bytes", type=int, default=4 * 1024 * 1024, help="larger bodies get 413")
    ps.add_argument("--max-queue", type=int, default=16, help="requests waiting for the model; more get 503")
    ps.add_argument(
        "--max-per-client",
        type=int,
        help="requests one key (or address, without keys) may have in flight; more get 429 "
        "(default with several keys: running slots plus --max-queue, shared among them; else none)",
    )
    ps.add_argument(
        "--max-connections", type=int, default=512, help="open connections; a new one past it is closed at once"
    )
    ps.add_argument(
        "--request-timeout",
        type=float,
        default=30.0,
        help="seconds a request (headers and body) may take to arrive, from the connection or the last response",
    )
    ps.add_argument("--idle-timeout", type=int, default=15, help="seconds an idle keep-alive connection stays open")
    ps.add_argument("--cors-origin", action="append", default=[], help="allow this browser origin (repeatable)")
    ps.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    for flag, kind, text in OPEN_FLAGS:
        ps.add_argument(flag, type=kind, help=text)
    ps.add_argument("--swa-full", action="store_true", default=None, help="full-size cache on sliding-window models")
    ps.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="logits independent of batch shape and cache history (slower prefill; docs/determinism.md)",
    )
    ps.add_argument("--chat-template-file", help="a Jinja chat template overriding the model's own")
    ps.add_argument(
        "--no-tool-call-recovery",
        dest="tool_call_recovery",
        action="store_false",
        default=None,
        help="leave tool calls written as JSON text in the content",
    )
    ps.add_argument(
        "--keep-repeated-calls",
        dest="answer_repeats",
        action="store_false",
        help="return a turn that only repeats answered tool calls as it is (default: ask for the answer; "
        "pyshim/repeats.py)",
    )
    ps.add_argument("--llama-log", dest="log", action="store_true", default=None, help="print llama.cpp's log")
    ps.set_defaults(func=cmd_serve)


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        from .server import Settings, serve
    except ImportError as e:
        print(f"pyshim serve needs the server extra: pip install 'pyshim[server]' ({e})", file=sys.stderr)
        return 2
    config = {f[2:].replace("-", "_"): getattr(args, f[2:].replace("-", "_")) for f, _, _ in OPEN_FLAGS}
    config.update(swa_full=args.swa_full, deterministic=args.deterministic)
    config.update(tool_call_recovery=args.tool_call_recovery, log=args.log)
    if args.chat_template_file:
        with open(args.chat_template_file, encoding="utf-8") as f:
            config["chat_template"] = f.read()
    name = args.name or (
        args.model if args.model in models.CATALOGUE else os.path.splitext(os.path.basename(args.model))[0]
    )
    settings = Settings(
        model=args.model,
        name=name,
        config={k: v for k, v in config.items() if v is not None},
        host=args.host,
        port=args.port,
        api_keys=api_keys(args),
        max_request_bytes=args.max_request_bytes,
        max_queue=args.max_queue,
        aliases=args.alias,
        max_per_client=args.max_per_client,
        max_connections=args.max_connections,
        request_timeout=args.request_timeout,
        idle_timeout=args.idle_timeout,
        cors_origins=args.cors_origin,
        log_level=args.log_level,
        answer_repeats=args.answer_repeats,
    )
    return serve(settings)


def api_keys(args: argparse.Namespace) -> list[str]:
    """--api-key (repeated), the lines of --api-key-file, else $PYSHIM_API_KEY."""
    keys = list(args.api_key)
    if args.api_key_file:
        with open(args.api_key_file, encoding="utf-8") as f:
            keys += [line.strip() for line in f if line.strip() and not line.lstrip().startswith("#")]
    env = os.environ.get("PYSHIM_API_KEY")
    return keys or ([env] if env else [])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="pyshim", description="Chat, the demo agent, the model catalogue, and the OpenAI-compatible server."
    )
    sub = p.add_subparsers(dest="command", required=True)

    pm = sub.add_parser("models", help="list or fetch catalogue models")
    pm.add_argument("action", choices=["list", "fetch"], help="list the catalogue, or fetch and verify models")
    pm.add_argument("names", nargs="*", help="catalogue names (fetch: default the default model)")
    pm.set_defaults(func=cmd_models)

    pc = sub.add_parser("chat", help="chat with a model (interactive, or one-shot with a prompt)")
    pc.add_argument("prompt", nargs="?", help="answer this one message and exit (default: an interactive chat)")
    pc.add_argument(
        "--model", default=models.DEFAULT, help="catalogue name, path to a .gguf file, or hf://org/repo/file.gguf"
    )
    pc.add_argument("--system", help="a system message that opens the conversation")
    pc.add_argument("--n-ctx", type=int, default=4096, help="context size in tokens (older turns go when it fills)")
    pc.add_argument("--max-tokens", type=int, default=512, help="longest reply, in tokens (a cut reply is marked)")
    pc.add_argument("--temperature", type=float, help="sampling temperature (default: the model's)")
    pc.add_argument("-v", "--verbose", action="store_true", help="print reuse and timing figures")
    pc.set_defaults(func=cmd_chat)

    pd = sub.add_parser("demo", help="run the demo agent with calculator, unit-conversion and file tools")
    pd.add_argument("task", nargs="?", default=DEMO_TASK, help="what to ask the agent")
    pd.add_argument(
        "--model", default=models.DEFAULT, help="catalogue name, path to a .gguf file, or hf://org/repo/file.gguf"
    )
    pd.add_argument("--n-ctx", type=int, default=4096, help="context size in tokens")
    pd.add_argument("--max-steps", type=int, default=6, help="model turns before the agent gives up")
    pd.add_argument(
        "--plan",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="list the steps first, take one per turn, answer from the results (Agent(plan=True); default on)",
    )
    pd.add_argument("--json", action="store_true", help="print the transcript as JSON")
    pd.set_defaults(func=cmd_demo)

    add_serve_parser(sub)

    args = p.parse_args(argv)
    try:
        return int(args.func(args))
    except ShimError as e:
        print(f"pyshim: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
