"""Corpus prompts whose text the look-alike-letter fold inside Latin words changes (herald_service/prompt_text.py), and
the shipped probe's verdicts before it (the character fold alone, as at f51e1a9) and after; prompts within 1,024
tokens. ``OMP_NUM_THREADS=1 python docs/eval/prompt_text/measure_mixed.py``; output in measure_mixed.txt."""
import json, glob, collections
from herald_service.config import Settings
from herald_service.engine.runtime import load_runtime
import herald_service.prompt_text as pt
from herald_service.types import user_turn

def without_words(t):  # the fold of f51e1a9: characters only
    return t if t.isascii() else "".join(pt._fold_char(c) for c in t)
rows = []
for f in sorted(glob.glob('/work/shared/data/*.jsonl')):
    for line in open(f, encoding='utf-8-sig'):
        if line.strip():
            r = json.loads(line)
            if pt.normalize_prompt_text(r['prompt']) != without_words(r['prompt']):
                rows.append((f.split('/')[-1], r['label'], r['prompt']))
print(len(rows), collections.Counter((s, l) for s, l, _ in rows).most_common(), flush=True)
rt = load_runtime(Settings(_env_file=None))
b = rt.backbone
out = collections.defaultdict(lambda: [0, 0, 0])
for src, label, p in rows:
    before = b.tokenizer([b.render(user_turn(without_words(p)))], add_special_tokens=False)["input_ids"][0]
    if len(before) > 1024:
        continue
    after = b.encode([user_turn(p)])[0]
    flags = [bool(rt.probe.predict(b.last_token_states([ids])).flagged[0]) for ids in (before, after)]
    o = out[(src, label)]; o[0] += 1; o[1] += flags[0]; o[2] += flags[1]
for k, v in sorted(out.items()):
    print(k, "n=%d flagged before=%d after=%d" % tuple(v))
