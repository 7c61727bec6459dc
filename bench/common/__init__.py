"""What every benchmark shares, in one place each: ``provenance`` (where a report came from),
``stats`` (the one definition of a spread, and the other statistics reports name), ``fixtures``
(the conversations, tools, models and filler text the benchmarks send), ``host`` (the machine,
llama-bench, a worker process), ``systems`` (pyshim and its peers behind one timed call) and
``rpc_servers`` (llama.cpp rpc-servers on loopback). No benchmark imports another benchmark,
``tests`` or ``scripts``: what two of them need lives here.
"""
