"""The shipped probe's verdicts on the corpus prompts that the prompt-text fold changes (herald_service/prompt_text.py).

Run at commit 7fbebbb, where ``Backbone.encode`` folded letters and digits only, with
``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure.py`` (about 25 minutes on the shared 2-core CPU); output in
measure.txt beside it. Per (source, label), prompts within 1,024 rendered tokens: n, and how many were flagged with
the text as written (``raw``), with ``fold2`` below (every character whose NFKC form is ASCII folded, format
characters removed: the rule prompt_text.py now ships) and with ``tok.encode`` as it was at 7fbebbb (``narrow``:
letters and digits only). At a later commit ``narrow`` is the shipped fold again.
"""
import json, glob, unicodedata, collections, time
from herald_service.config import Settings
from herald_service.engine.runtime import load_runtime

def fold2(c):
    if unicodedata.category(c) == "Cf":
        o = ord(c); return chr(o - 0xE0000) if 0xE0020 <= o <= 0xE007E else ""
    if c.isascii(): return c
    n = unicodedata.normalize("NFKC", c)
    return n if n.isascii() else c
norm2 = lambda t: "".join(fold2(c) for c in t)
rows = []
for f in sorted(glob.glob('/work/shared/data/*.jsonl')):
    for line in open(f, encoding='utf-8-sig'):
        if line.strip():
            r = json.loads(line)
            if norm2(r['prompt']) != r['prompt']:
                rows.append((f.split('/')[-1], r['label'], r['prompt']))
print(len(rows), collections.Counter((s, l) for s, l, _ in rows).most_common(), flush=True)
rt = load_runtime(Settings(_env_file=None))
tok = rt.backbone
out = collections.defaultdict(lambda: [0, 0, 0, 0])  # n, flagged raw, flagged v2, flagged narrow (shipped code)
from herald_service.types import user_turn
t0 = time.time()
for i, (src, label, p) in enumerate(rows):
    ids_raw = tok.tokenizer([tok.render(user_turn(p))], add_special_tokens=False)["input_ids"][0]
    if len(ids_raw) > 1024: continue
    ids_v2 = tok.tokenizer([tok.render(user_turn(norm2(p)))], add_special_tokens=False)["input_ids"][0]
    ids_n = tok.encode([user_turn(p)])[0]
    preds = [rt.probe.predict(tok.last_token_states([ids])) for ids in (ids_raw, ids_v2, ids_n)]
    flags = [bool(p_.flagged[0]) if hasattr(p_, 'flagged') else None for p_ in preds]
    o = out[(src, label)]; o[0] += 1
    for k, fl in enumerate(flags): o[k+1] += int(fl)
    if i % 50 == 0: print(i, time.time() - t0, flush=True)
for k, v in sorted(out.items()): print(k, "n=%d raw=%d v2=%d narrow=%d" % tuple(v))
