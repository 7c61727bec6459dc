"""What the benchmarks send: the scripted agent conversation and its tool, the desks' briefs,
filler prose, and the catalogue models they run.

Every system and every benchmark gets these same prompts, so that their figures compare.
"""

from __future__ import annotations

import json
import random
from typing import Any

#: The models the peer benchmarks compare (the default model and a sliding-window one).
PEER_MODELS = ["qwen2.5-coder-0.5b-instruct", "gemma-3-270m"]
#: Every catalogue model the benchmarks that cover the catalogue run.
ALL_MODELS = [*PEER_MODELS, "smollm2-135m-instruct"]

CITIES = ["Paris", "Oslo", "Lima", "Cairo", "Tokyo", "Quito", "Perth", "Dakar", "Hanoi", "Riga"]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def conversation(turns: int, who: str = "", brief: str = "") -> list[list[dict[str, Any]]]:
    """The prompt of each turn: the same history, grown by one exchange per turn.

    ``who`` opens the system prompt, so conversations with different ones diverge early;
    ``brief`` closes it (standing instructions, as agent programs carry).
    """
    system = f"{who}You are a weather assistant. Use get_weather, then answer in one sentence.{brief}"
    messages: list[dict[str, Any]] = [{"role": "system", "content": system}]
    prompts = []
    for i in range(turns):
        city = CITIES[i % len(CITIES)]
        call_id = f"call_{i:03d}"
        messages += [
            {
                "role": "user",
                "content": f"Turn {i + 1}: how is the weather in {city} right now, and should I pack an umbrella?",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": json.dumps({"city": city})},
                    }
                ],
            },
            {
                "role": "tool",
                "tool_call_id": call_id,
                "content": json.dumps(
                    {"city": city, "temperature_c": 10 + i, "rain_probability": (i * 37) % 100 / 100}
                ),
            },
        ]
        prompts.append(list(messages))
        messages.append({"role": "assistant", "content": f"In {city} it is {10 + i} °C; take an umbrella if you like."})
    return prompts


FILLER = (
    "The harbour master logs every ship that enters the bay, its cargo, its crew and the hour "
    "of its arrival, and at dusk he reads the list aloud to the lighthouse keeper. "
)

BRIEF = "\n\nStanding instructions for this desk:\n" + "\n".join(
    f"{i}. When a traveller asks about {place}, check the weather there first, quote the temperature in "
    f"degrees Celsius, mention the chance of rain as a percentage, and suggest one item to pack."
    for i, place in enumerate(
        [
            "a coastal town",
            "a mountain pass",
            "a desert city",
            "an island",
            "a river port",
            "a high plateau",
            "a northern capital",
            "a southern harbour",
            "a forest village",
            "a lake resort",
            "a border crossing",
            "a volcanic valley",
            "a fishing village",
            "a university town",
        ],
        start=1,
    )
)

DESKS = ["north", "south", "east", "west"]


def desk_conversations(run: int, n_conv: int, quick: bool = False) -> list[list[list[dict[str, Any]]]]:
    """The n_conv agent conversations of one run (6 turns; 2 and no brief when quick): each
    turn's prompt, per conversation. They differ from their system prompt's first words on
    ("Run 1. Desk 2 of 4, south."), and each carries the ~500-token brief."""
    return [
        conversation(
            2 if quick else 6, who=f"Run {run}. Desk {c + 1} of {n_conv}, {DESKS[c]}. ", brief="" if quick else BRIEF
        )
        for c in range(n_conv)
    ]


def session_max_tokens(quick: bool = False) -> int:
    """What the model may write per agent turn."""
    return 4 if quick else 16


def prose(seed: str, n_words: int) -> str:
    """``n_words`` words of the filler, shuffled sentence by sentence with ``seed``: text a model
    reads as prose, the same for every system given the same seed."""
    words = (FILLER * (n_words // 30 + 1)).split()
    rng = random.Random(seed)
    start = rng.randrange(len(words) - n_words + 1) if len(words) > n_words else 0
    return " ".join(words[start : start + n_words])


# -- the support desk: an agent app's long fixed instructions and six tools, shared by every
# conversation (bench.shared_prefix across conversations, bench.disk_prefix across processes)

SUPPORT_MAX_TOKENS = 16
SUPPORT_N_CTX = 4096  # per slot
TOPICS = ["billing", "shipping", "returns", "warranty", "accounts", "privacy", "orders", "refunds"]
TOOL_NAMES = ["lookup_order", "refund_order", "track_parcel", "update_address", "open_ticket", "check_stock"]


def support_prompt() -> str:
    """An agent app's instructions: fixed, ~1,500 tokens with the tools (qwen2.5's template)."""
    rng = random.Random("shared-prefix")
    lines = ["You are the support assistant of Northwind Outfitters. Follow every rule below."]
    for i in range(20):
        topic, days, amount = rng.choice(TOPICS), rng.randint(2, 60), rng.randint(5, 500)
        lines.append(
            f"Rule {i + 1} ({topic}): requests about {topic} older than {days} days or above {amount} dollars "
            f"go to a human agent; otherwise answer from the tools, briefly and politely."
        )
    return "\n".join(lines)


def support_tools() -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": f"{name.replace('_', ' ').capitalize()} for a customer, by order or account id.",
                "parameters": {
                    "type": "object",
                    "properties": {"id": {"type": "string", "description": "the order or account id"}},
                    "required": ["id"],
                },
            },
        }
        for name in TOOL_NAMES
    ]
