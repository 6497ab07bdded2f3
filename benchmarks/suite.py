"""All benchmarks in one process on one loaded backbone (one GPU lease builds the 8B model once).

Run: ``python -m benchmarks.suite --target h200`` (writes every JSON and PNG; each table printed as it finishes).
``torch.compile`` of the decoder runs last (its compile time is long), written to ``compile_<target>.json``.
"""

from __future__ import annotations

import traceback

from benchmarks import hardware_limit, overhead, peer, scaling
from benchmarks.common import build_target, parse_args, print_table, token_pool, write


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    target = build_target(args.target)
    steps = [
        (hardware_limit, lambda: hardware_limit.run(target, args.quick, compile_too=False)),
        (peer, lambda: peer.run(target, args.quick)),
        (overhead, lambda: overhead.run(target, args.quick)),
        (scaling, lambda: scaling.run(target, args.quick)),
    ]
    only = {name for name in args.only.split(",") if name}
    failed = []
    for module, run in steps:
        name = module.__name__.rsplit(".", 1)[-1]
        if only and name not in only:
            continue
        try:
            module.report(target, run(), args.out)
        except Exception:  # one broken benchmark must not cost the lease the others
            traceback.print_exc()
            failed.append(name)
    if target.cuda and not args.quick and (not only or "compile" in only):
        result = hardware_limit.compile_variant(target, token_pool(target), 10 if target.cuda else 2)
        print_table("torch.compile of the decoder", [result])
        write(args.out, "compile", target, result)
    if failed:  # the smoke run exited 0 with three of four benchmarks failed (README pass)
        raise SystemExit(f"benchmarks.suite: {len(failed)} failed: {', '.join(failed)} (tracebacks above)")


if __name__ == "__main__":
    main()
