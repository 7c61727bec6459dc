"""``python -m pyshim``: chat, the demo agent, and the model catalogue."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import models
from .agent import Agent, Event
from .demo_tools import DEMO_TOOLS
from .errors import ContextFull, ShimError
from .model import Model

DEMO_SYSTEM = (
    "Answer the user's questions. To get facts, call tools. Once you have the tool results, "
    "respond with a short plain-text answer that states the results."
)
DEMO_TASK = "Use the tools to compute 12.5 times 3, and to convert 37.5 km to miles, then tell me both results."


def _reuse_line(r: dict[str, Any]) -> str:
    return (
        f"prompt {r['n_prompt']} tok, reused {r['n_reused']}, prefill {r['ms_prefill']:.0f} ms, "
        f"decoded {r['n_decoded']} in {r['ms_decode']:.0f} ms"
    )


def cmd_models(args: argparse.Namespace) -> int:
    if args.action == "list":
        for name, e in models.CATALOGUE.items():
            mark = models.status(name)
            if mark == "damaged":
                mark = f"damaged: `python -m pyshim models fetch {name}` repairs it"
            default = " (default)" if name == models.DEFAULT else ""
            print(f"{name:32} {e.architecture:48} {e.size / 1e6:6.0f} MB  {mark}{default}")
        return 0
    for name in args.names or [models.DEFAULT]:
        print(models.path(name))
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"max_tokens": args.max_tokens}
    if args.temperature is not None:
        options["temperature"] = args.temperature
    with Model(args.model, n_ctx=args.n_ctx) as m:
        messages: list[dict[str, Any]] = []
        if args.system:
            messages.append({"role": "system", "content": args.system})
        prompts = [args.prompt] if args.prompt else None
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
            messages.append({"role": "user", "content": text})

            def show(delta: dict[str, Any]) -> None:
                if "prompt_progress" in delta:
                    p = delta["prompt_progress"]
                    end = "\n" if p["processed"] == p["total"] else ""
                    print(
                        f"\r[reading prompt {p['processed']}/{p['total']} tokens]", end=end, file=sys.stderr, flush=True
                    )
                print(delta.get("content", ""), end="", flush=True)

            try:
                r = m.generate(messages, on_delta=show, **options)
            except ContextFull as e:
                print(
                    f"\npyshim: the conversation no longer fits the context ({e}); start again with a larger --n-ctx",
                    file=sys.stderr,
                )
                return 1
            except KeyboardInterrupt:  # the reply stops; the model and the conversation so far stay
                print("\n[stopped]", file=sys.stderr)
                messages.pop()
                if prompts is not None:
                    return 130
                continue
            print()
            if r.get("truncated"):
                print(
                    "pyshim: the context is full, the reply was cut short; start again with a larger --n-ctx",
                    file=sys.stderr,
                )
                return 1
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
        elif e["type"] == "nudge":
            print(f"(asking for the answer: {e['content']})")

    print(f"model: {args.model}\ntask: {args.task}\n")
    with Model(args.model, n_ctx=args.n_ctx) as m:
        agent = Agent(
            m,
            DEMO_TOOLS,
            system=DEMO_SYSTEM,
            max_steps=args.max_steps,
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="pyshim", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    pm = sub.add_parser("models", help="list or fetch catalogue models")
    pm.add_argument("action", choices=["list", "fetch"])
    pm.add_argument("names", nargs="*")
    pm.set_defaults(func=cmd_models)

    pc = sub.add_parser("chat", help="chat with a model (interactive, or one-shot with a prompt)")
    pc.add_argument("prompt", nargs="?")
    pc.add_argument("--model", default=models.DEFAULT)
    pc.add_argument("--system")
    pc.add_argument("--n-ctx", type=int, default=4096)
    pc.add_argument("--max-tokens", type=int, default=512)
    pc.add_argument("--temperature", type=float)
    pc.add_argument("-v", "--verbose", action="store_true", help="print reuse and timing figures")
    pc.set_defaults(func=cmd_chat)

    pd = sub.add_parser("demo", help="run the demo agent with calculator, unit-conversion and file tools")
    pd.add_argument("task", nargs="?", default=DEMO_TASK)
    pd.add_argument("--model", default=models.DEFAULT)
    pd.add_argument("--n-ctx", type=int, default=4096)
    pd.add_argument("--max-steps", type=int, default=6)
    pd.add_argument("--json", action="store_true", help="print the transcript as JSON")
    pd.set_defaults(func=cmd_demo)

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
