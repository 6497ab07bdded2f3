"""Settings refuse unsafe values at start-up."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from herald_service.config import CPU_TOKEN_BUDGET, CUDA_TOKEN_BUDGET, Settings, pass_limits


def test_env_names_are_the_contract(monkeypatch):
    monkeypatch.setenv("HERALD_PORT", "9100")
    monkeypatch.setenv("HERALD_API_KEYS", "key-one-abcdefgh, key-two-abcdefgh")
    monkeypatch.setenv("HERALD_MAX_TOKENS", "512")
    s = Settings(_env_file=None)
    assert s.port == 9100
    assert [k.get_secret_value() for k in s.api_keys] == ["key-one-abcdefgh", "key-two-abcdefgh"]
    assert s.max_tokens == 512


@pytest.mark.parametrize("key", ["changeme", "short", "changeme-changeme", "your-api-key-here", "REPLACE_ME_0123456"])
def test_placeholder_or_short_keys_are_refused(key):
    with pytest.raises(ValidationError, match="at least 12 characters"):
        Settings(api_keys=key, _env_file=None)


def test_steer_needs_its_own_key():
    with pytest.raises(ValidationError, match="HERALD_STEER_API_KEY"):
        Settings(steer_enabled=True, _env_file=None)
    assert Settings(steer_enabled=True, steer_api_key="steer-key-0123456789", _env_file=None).steer_enabled
    # one of the moderation clients' keys would let every client call /steer (tester)
    with pytest.raises(ValueError, match="HERALD_STEER_API_KEY is also one of HERALD_API_KEYS"):
        Settings(steer_enabled=True, steer_api_key="shared-key-0123456789", api_keys="k-0123456789ab,shared-key-0123456789",
                 _env_file=None)
    assert Settings(steer_enabled=True, steer_api_key="steer-key-0123456789", api_keys="client-key-0123456789",
                    _env_file=None).steer_enabled
    # with steering off the key opens nothing; keys of any script are compared (a TypeError traceback on non-ASCII)
    assert not Settings(steer_api_key="shared-key-0123456789", api_keys="shared-key-0123456789", _env_file=None).steer_enabled
    # a key no HTTP header can carry is refused by name (it was a TypeError traceback beside the /steer key, and
    # alone a key that could never authenticate)
    for keys in ({"api_keys": "ключключключключ"}, {"steer_enabled": True, "steer_api_key": "ключключключключ"}):
        with pytest.raises(ValueError, match="not printable ASCII; HTTP headers carry ASCII"):
            Settings(**keys, _env_file=None)


def test_token_budget_must_hold_the_longest_single_pass():
    with pytest.raises(ValidationError, match=r"batch_token_budget \(4096, HERALD_BATCH_TOKEN_BUDGET\) is below max_tokens"
                       r" \(10000, HERALD_MAX_TOKENS\) with prefill chunks off \(HERALD_PREFILL_CHUNK_TOKENS\): a prompt at"
                       " the limit must fit in one forward pass"):
        Settings(max_tokens=10_000, batch_token_budget=4096, prefill_chunk_tokens=0, _env_file=None)
    with pytest.raises(ValidationError, match=r"with prefill chunks off \(HERALD_PREFILL_CHUNK_TOKENS, auto\)"):
        Settings(max_tokens=10_000, batch_token_budget=4096, device="cuda", _env_file=None)  # auto: off on CUDA
    with pytest.raises(ValidationError, match=r"below prefill_chunk_tokens \(1024, HERALD_PREFILL_CHUNK_TOKENS\): a chunk"
                       " must fit in one forward pass"):
        Settings(batch_token_budget=512, prefill_chunk_tokens=1024, _env_file=None)
    # a prompt longer than the chunk is prefilled alone, chunk by chunk: it never needs the budget
    assert Settings(max_tokens=10_000, batch_token_budget=4096, device="cpu", _env_file=None).batch_token_budget == 4096
    assert Settings(max_tokens=10_000, batch_token_budget=1024, prefill_chunk_tokens=1024,
                    _env_file=None).batch_token_budget == 1024
    # device auto, chunk auto: which it is, only the loaded backbone tells (engine_limits; test_chunked_prefill.py)
    assert Settings(max_tokens=10_000, batch_token_budget=4096, _env_file=None).batch_token_budget == 4096
    # ... but a budget below the CPU's chunk fails on every device: refused before the load (it came 14 s in: re-tester)
    with pytest.raises(ValidationError, match=r"batch_token_budget \(100, HERALD_BATCH_TOKEN_BUDGET\) is below 512 tokens,"
                       " the shortest a forward pass must hold on any device"):
        Settings(batch_token_budget=100, _env_file=None)
    assert Settings(batch_token_budget=512, _env_file=None).batch_token_budget == 512
    assert Settings(batch_token_budget=100, max_tokens=100, _env_file=None).batch_token_budget == 100


def test_auto_token_budget_follows_the_device_and_the_longest_pass():
    assert Settings(_env_file=None).batch_token_budget == "auto"
    assert pass_limits(None, None, 4096, on_host=True) == (CPU_TOKEN_BUDGET, 512) == (2048, 512)
    assert pass_limits(None, None, 4096, on_host=False) == (CUDA_TOKEN_BUDGET, 0) == (8192, 0)
    assert pass_limits(None, 0, 4096, on_host=True) == (4096, 0)  # chunks off: a prompt at the limit is one pass
    assert pass_limits(None, None, 32_768, on_host=False) == (32_768, 0)
    assert pass_limits(None, 3000, 4096, on_host=True) == (3000, 3000)
    assert pass_limits(None, 3000, 1000, on_host=True) == (2048, 3000)  # no prompt reaches the chunk
    assert pass_limits(1024, None, 4096, on_host=True) == (1024, 512)
    assert Settings(batch_token_budget="AUTO", _env_file=None).batch_token_budget == "auto"
    for value, shown in (("big", "'big'"), (32, "32"), ("8k", "'8k'")):
        with pytest.raises(ValidationError, match=f"batch_token_budget\n.*must be auto or a whole number of tokens from"
                                                  f" 64 to 16,777,216, got {shown}"):
            Settings(batch_token_budget=value, _env_file=None)


def test_empty_strings_from_configmaps_mean_unset():
    s = Settings(steer_api_key="", probe="", api_keys="", _env_file=None)
    assert s.steer_api_key is None and s.probe is None and s.api_keys == []


def test_a_full_size_request_must_fit_the_queue():
    with pytest.raises(ValidationError, match="queue_capacity"):
        Settings(max_batch_size=64, queue_capacity=16, _env_file=None)


def test_a_long_random_key_is_accepted():
    assert len(Settings(api_keys="kq8Zr2pVxW4mT9sLb3Nd").api_keys) == 1


@pytest.mark.parametrize("name", ["HERALD_BACKBONE", "HERALD_PADDING_SIDE", "HERALD_MAX_TOKENS", "HERALD_PROBE"])
def test_empty_environment_values_mean_unset(monkeypatch, name):
    monkeypatch.setenv(name, "")
    field = name.removeprefix("HERALD_").lower()
    assert getattr(Settings(), field) == Settings.model_fields[field].get_default(call_default_factory=True)


@pytest.mark.parametrize("value", ["nan", "inf"])
def test_non_finite_durations_are_refused_as_such(monkeypatch, value):
    monkeypatch.setenv("HERALD_BATCH_DELAY_MS", value)
    with pytest.raises(ValidationError, match="finite number"):
        Settings(_env_file=None)


def test_an_empty_host_flag_is_refused_and_an_empty_host_variable_is_unset(monkeypatch):
    # `herald serve --host ""` listened on every interface, while HERALD_HOST="" kept 127.0.0.1 (re-tester)
    with pytest.raises(ValidationError, match="give an address: 127.0.0.1"):
        Settings(_env_file=None, host="")
    monkeypatch.setenv("HERALD_HOST", "")
    assert Settings(_env_file=None).host == "127.0.0.1"


@pytest.mark.parametrize("name", ["HERALD_REQUEST_TIMEOUT_S", "HERALD_KEEP_ALIVE_S", "HERALD_BODY_TIMEOUT_S",
                                  "HERALD_HEADER_TIMEOUT_S"])
@pytest.mark.parametrize("value", ["1e10", "1e308"])
def test_every_timeout_is_at_most_an_hour(monkeypatch, name, value):
    # 1e308 was accepted for the slow-client timeouts: no bound on a client trickling its headers or body (tester);
    # HERALD_REQUEST_TIMEOUT_S=1e10 was accepted and the shutdown's thread join overflowed ("Application shutdown
    # failed"), and 1e308 gave /steer a 309-digit Retry-After (tester)
    monkeypatch.setenv(name, value)
    with pytest.raises(ValidationError, match="less than or equal to 3600"):
        Settings(_env_file=None)
    monkeypatch.setenv(name, "3600")
    assert getattr(Settings(_env_file=None), name.removeprefix("HERALD_").lower()) == 3600


@pytest.mark.parametrize("name", ["HERALD_BODY_TIMEOUT_S", "HERALD_HEADER_TIMEOUT_S"])
def test_the_slow_client_timeouts_are_at_least_a_tenth_of_a_second(monkeypatch, name):
    monkeypatch.setenv(name, "1e-9")  # accepted, and a first request got 408 (re-tester)
    with pytest.raises(ValidationError, match="greater than or equal to 0.1"):
        Settings(_env_file=None)


@pytest.mark.parametrize(("device", "dtype"), [("cpu", "auto"), ("auto", "float32")])
def test_varlen_where_it_cannot_run_is_refused_before_loading(device, dtype):
    with pytest.raises(ValidationError, match="varlen needs CUDA"):
        Settings(_env_file=None, padding_side="varlen", device=device, dtype=dtype)


@pytest.mark.parametrize("value", [" , ", ",", " ,, "])
def test_api_keys_of_only_separators_are_refused_not_read_as_open(monkeypatch, value):
    monkeypatch.setenv("HERALD_API_KEYS", value)
    with pytest.raises(ValidationError, match="separators but no key"):
        Settings(_env_file=None)
    monkeypatch.setenv("HERALD_API_KEYS", "")
    assert Settings(_env_file=None).api_keys == []  # empty still means open, as documented


@pytest.mark.parametrize("value", [" ", "\t", "  \n "])
def test_api_keys_of_only_whitespace_are_refused_not_read_as_open(monkeypatch, value):
    # a tester's HERALD_API_KEYS=' ' started an open API with a warning, while ',' was refused
    monkeypatch.setenv("HERALD_API_KEYS", value)
    with pytest.raises(ValidationError, match="only whitespace, no key"):
        Settings(_env_file=None)


def _dotenv_refusal(tmp_path, monkeypatch, text: str | bytes) -> str:
    """The message of the SettingsFileError that Settings() raises in a folder whose .env holds ``text``."""
    from herald_service.errors import SettingsFileError

    monkeypatch.chdir(tmp_path)
    if isinstance(text, bytes):
        (tmp_path / ".env").write_bytes(text)
    else:
        (tmp_path / ".env").write_text(text)
    with pytest.raises(SettingsFileError) as caught:
        Settings()
    return caught.value.message


def test_a_dotenv_that_is_not_utf8_is_named(tmp_path, monkeypatch):
    message = _dotenv_refusal(tmp_path, monkeypatch, "HERALD_HOST=caf\u00e9\n".encode("latin-1"))
    assert message == f"settings file {tmp_path / '.env'} is not UTF-8 text (line 1: byte 0xe9); save it as UTF-8"
    assert Settings(_env_file=None).host == "127.0.0.1"


@pytest.mark.parametrize("line", ["HERALD_API_KEYS abcdefabcdefabcdef", "HERALD_API_KEYS: abcdefabcdefabcdef",
                                  "HERALD_API_KEYS='abcdefabcdefabcdef"])
def test_a_dotenv_line_that_is_not_name_equals_value_is_refused_naming_it(tmp_path, monkeypatch, line):
    # python-dotenv skips such a line with a warning, so a mistyped HERALD_API_KEYS left the API open (breaker pass)
    message = _dotenv_refusal(tmp_path, monkeypatch, f"HERALD_LOG_LEVEL=info\n{line}\nHERALD_PORT=8001\n")
    assert message == (f"settings file {tmp_path / '.env'} line 2 is not NAME=VALUE (it starts"
                                    " 'HERALD_API_KEYS'); write it as NAME=value or remove it")
    assert "abcdef" not in message  # the value may be a key
    (tmp_path / ".env").write_text("# a comment\nexport HERALD_PORT=8001\n\nHERALD_API_KEYS=abcdefabcdefabcdef\n")
    assert Settings().port == 8001 and len(Settings().api_keys) == 1


@pytest.mark.parametrize("line", ["HERALD_API_KEYS:abcdefabcdefabcdef", "HERALD_API_KEYS-abcdefabcdefabcdef",
                                  "HERALD_API_KEYS,abcdefabcdefabcdef", '"HERALD_API_KEYS"=abcdefabcdefabcdef',
                                  "HERALD_API_KEYS", "export HERALD_API_KEYS", "herald_api_keys"])
def test_a_dotenv_line_that_dotenv_misreads_is_refused_naming_it_without_its_value(tmp_path, monkeypatch, line):
    # python-dotenv read the first three as a name holding the key (logged upper-cased as an unknown setting), the
    # quoted name as a name holding quotes and a name without '=' as no value: both ignored, the API left open
    message = _dotenv_refusal(tmp_path, monkeypatch, f"HERALD_LOG_LEVEL=info\n{line}\nHERALD_PORT=8001\n")
    name = "herald_api_keys" if line.islower() else "HERALD_API_KEYS"
    assert message == (f"settings file {tmp_path / '.env'} line 2 is not NAME=VALUE (it starts"
                                    f" {name!r}); write it as NAME=value or remove it")
    assert "abcdef" not in message.lower()


def test_a_dotenv_line_without_a_name_says_so(tmp_path, monkeypatch):
    message = _dotenv_refusal(tmp_path, monkeypatch, "HERALD_PORT=8001\n=abcdefabcdefabcdef\n")
    assert message == (f"settings file {tmp_path / '.env'} line 2 has no name (NAME=value); write it as"
                                    " NAME=value or remove it")


@pytest.mark.parametrize("line", ["HERALD_API_KEYS=SECRET${NOPE}123abcdef", "HERALD_API_KEYS=${UNSET}",
                                  "HERALD_API_KEYS='SECRET${NOPE}123abcdef'", 'HERALD_API_KEYS="SECRET${NOPE}123abcdef"',
                                  "herald_api_keys=SECRET${HOME}123abcdef"])
def test_a_dotenv_value_python_dotenv_would_expand_is_refused_naming_it_without_its_value(tmp_path, monkeypatch, line):
    # python-dotenv replaced ${NOPE} with "" (quoted or not): the first key became SECRET123abcdef, the second left the
    # API open with only the no-keys warning (tester pass)
    from dotenv import dotenv_values

    monkeypatch.delenv("NOPE", raising=False)
    monkeypatch.delenv("UNSET", raising=False)
    message = _dotenv_refusal(tmp_path, monkeypatch, f"HERALD_LOG_LEVEL=info\n{line}\n")
    assert "${" not in dotenv_values(tmp_path / ".env")[line.split("=")[0]]  # what the check guards against
    name = line.split("=")[0]
    assert message == (f"settings file {tmp_path / '.env'} line 2 sets {name} to a value holding '${{':"
                                    " python-dotenv would replace ${NAME} in it with the environment's NAME (with"
                                    " nothing when unset), in quotes too; set that value in the environment instead")
    assert "SECRET" not in message and "NOPE" not in message
    (tmp_path / ".env").write_text("OTHER_TOOL=${HOME}/x\nHERALD_API_KEYS=abc$defabcdefabc{x}\n")  # no '${': as written
    assert [k.get_secret_value() for k in Settings().api_keys] == ["abc$defabcdefabc{x}"]
    monkeypatch.setenv("HERALD_API_KEYS", "SECRET${NOPE}123abcdef")  # the environment is read as written
    assert [k.get_secret_value() for k in Settings(_env_file=None).api_keys] == ["SECRET${NOPE}123abcdef"]


@pytest.mark.parametrize(("second", "names"), [
    ("HERALD_API_KEYS=", "HERALD_API_KEYS"),
    ("export HERALD_API_KEYS=other-key-abcdef", "HERALD_API_KEYS"),
    ("herald_api_keys=", "HERALD_API_KEYS (as herald_api_keys, case is ignored)"),
])
def test_a_dotenv_name_set_twice_is_refused_naming_both_lines_without_values(tmp_path, monkeypatch, second, names):
    # python-dotenv keeps the last: a later empty HERALD_API_KEYS= opened the API with only the no-keys warning
    message = _dotenv_refusal(tmp_path, monkeypatch, f"HERALD_API_KEYS=first-key-abcdef\n# later\nHERALD_PORT=8001\n{second}\n")
    assert message == (f"settings file {tmp_path / '.env'} sets {names} on line 1 and again on line 4;"
                                    " only the last would count: keep one line")
    assert "key-abcdef" not in message
    # two files set the same name: layering, the later file wins
    (tmp_path / ".env").write_text("HERALD_API_KEYS=first-key-abcdef\nOTHER=1\nOTHER=2\n")
    (tmp_path / "local.env").write_text("HERALD_API_KEYS=other-key-abcdef\n")
    settings = Settings(_env_file=(tmp_path / ".env", tmp_path / "local.env"))
    assert [k.get_secret_value() for k in settings.api_keys] == ["other-key-abcdef"]


def test_dotenv_lines_herald_reads_as_written_still_pass(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("OTHER_TOOL_FLAG\n'HERALD_PORT'=8001\nHERALD_MAX_CHARS=\nHERALD_API_KEYS = abcdefabcdefabcdef\n")
    settings = Settings()
    assert (settings.port, settings.max_chars) == (8001, 32_000)
    assert [k.get_secret_value() for k in settings.api_keys] == ["abcdefabcdefabcdef"]


def test_an_unknown_name_is_logged_only_up_to_its_first_character_no_name_holds(monkeypatch):
    # an environment name can hold ':' (a .env one is refused): what follows may be a key
    from herald_service.config import unknown_setting_names

    monkeypatch.setenv("HERALD_API_KEYS:abcdefabcdefabcdef", "1")
    refused, unknown = unknown_setting_names(list(Settings.model_fields), None)
    assert unknown == [] and len(refused) == 1  # it looks like a key: refused, not ignored
    assert refused[0].startswith("HERALD_API_KEYS... (set in the environment) is not a Herald setting and looks like a key")
    assert "abcdef" not in refused[0]
    monkeypatch.delenv("HERALD_API_KEYS:abcdefabcdefabcdef")
    monkeypatch.setenv("HERALD_SOME:abcdefabcdefabcdef", "1")
    assert unknown_setting_names(list(Settings.model_fields), None) == (
        [], ["HERALD_SOME... (set in the environment) is not a Herald setting and is ignored"])


@pytest.mark.parametrize(("value", "error"), [
    ('["key-one-abcdefgh"]', "looks like a JSON list; give the keys comma-separated"),
    (' ["key-one-abcdefgh", "key-two-abcdefgh"] ', "looks like a JSON list; give the keys comma-separated"),
    ("key-one-abcdefgh,,key-two-abcdefgh", "key 2 of 3 is empty"),
    ("key-one-abcdefgh, ,key-two-abcdefgh", "key 2 of 3 is empty"),
    (",key-one-abcdefgh", "key 1 of 2 is empty"),
    ("key-one-abcdefgh,", "key 2 of 2 is empty"),
])
def test_api_keys_as_a_json_list_or_with_an_empty_key_are_refused(monkeypatch, value, error):
    # a JSON list was read as one key holding brackets and quotes; an empty segment was dropped without a word
    monkeypatch.setenv("HERALD_API_KEYS", value)
    with pytest.raises(ValidationError, match="api_keys") as caught:
        Settings(_env_file=None)
    assert error in str(caught.value)


@pytest.mark.parametrize(("variable", "value", "error"), [
    ("HERALD_API_KEYS", "key-one-abcdefgh key-two-abcdefgh", "HERALD_API_KEYS: a key holds a space or a line break"),
    ("HERALD_API_KEYS", "key-one-abcdefgh\nkey-two-abcdefgh", "HERALD_API_KEYS: a key holds a space or a line break"),
    ("HERALD_API_KEYS", '"key-one-abcdefgh"', "HERALD_API_KEYS: a key starts or ends with a quote"),
    ("HERALD_API_KEYS", "Bearer key-one-abcdefgh", "HERALD_API_KEYS: give the key without the 'Bearer ' scheme"),
    ("HERALD_STEER_API_KEY", "bearer steer-key-abcdefgh", "HERALD_STEER_API_KEY: give the key without the 'Bearer ' scheme"),
])
def test_keys_no_client_could_send_are_refused_at_start_up(monkeypatch, variable, value, error):
    # each was accepted, and every request then got 401 with nothing said at start-up (breaker pass)
    monkeypatch.setenv(variable, value)
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None)
    assert error in str(caught.value)
    monkeypatch.setenv(variable, "key-one-abcdefgh")
    assert Settings(_env_file=None) is not None


def test_a_misspelt_setting_is_refused_naming_it_and_the_setting_meant(monkeypatch, tmp_path):
    # The breaker's case: HERALD_API_KEY (singular) was ignored, and the API served without a key.
    from herald_service.errors import MisspeltSetting

    monkeypatch.setenv("HERALD_API_KEY", "abcdefghijklmnop-123")
    with pytest.raises(MisspeltSetting) as refused:
        Settings(_env_file=None)
    assert refused.value.message.startswith("HERALD_API_KEY (set in the environment) is not a setting; did you mean"
                                            " HERALD_API_KEYS?")
    monkeypatch.delenv("HERALD_API_KEY")
    env = tmp_path / ".env"
    env.write_text("HERALD_MAX_TOKEN=100\nHERALD_PORT=9100\n")
    with pytest.raises(MisspeltSetting, match=rf"HERALD_MAX_TOKEN \(set in {env}\) is not a setting; did you mean HERALD_MAX_TOKENS\?"):
        Settings(_env_file=env)


def test_names_in_the_environment_that_differ_only_in_case_are_refused_naming_both(monkeypatch):
    # breaker pass: HERALD_API_KEYS and HERALD_api_keys were read as one setting, the later one winning silently
    from herald_service.errors import MisspeltSetting

    monkeypatch.setenv("HERALD_API_KEYS", "client-key-0123456789")
    monkeypatch.setenv("HERALD_api_keys", "other-key-9876543210")
    with pytest.raises(MisspeltSetting) as refused:
        Settings(_env_file=None)
    assert refused.value.message == ("HERALD_API_KEYS and HERALD_api_keys are both set in the environment and are one"
                                     " setting, as names are read in any case: only one would be read, without a"
                                     " word; unset the others")
    assert "client-key" not in refused.value.message and "other-key" not in refused.value.message
    monkeypatch.delenv("HERALD_api_keys")
    assert Settings(_env_file=None).api_keys is not None


@pytest.mark.parametrize("name", ["HERALD_API_KEYS_FILE", "HERALD_API_TOKEN", "HERALD_KEYS", "HERALD_AUTH_KEYS",
                                  "herald_client_secret", "HERALD_ADMIN_PASSWORD", "HERALD_ACCESS_TOKENS"])
def test_an_unknown_name_that_looks_like_a_key_is_refused_naming_it_and_the_key_settings(monkeypatch, tmp_path, name):
    # tester: each was "not a Herald setting and is ignored" (a warning), and the server started with no keys
    from herald_service.errors import MisspeltSetting

    monkeypatch.setenv(name, "abcdefghijklmnop-123")
    with pytest.raises(MisspeltSetting) as refused:
        Settings(_env_file=None)
    assert refused.value.message == (
        f"{name.upper()} (set in the environment) is not a Herald setting and looks like a key; it is refused, not"
        " ignored, as the API would be left open: Herald's keys are HERALD_API_KEYS (the API's bearer keys,"
        " comma-separated) and HERALD_STEER_API_KEY (/steer's); no other name is read, and no key file: pass the"
        " key's value in the environment (a Kubernetes Secret's env/envFrom, or Docker's environment:) or in .env")
    assert "abcdefghijklmnop" not in refused.value.message
    monkeypatch.delenv(name)
    env = tmp_path / ".env"
    env.write_text(f"{name}=abcdefghijklmnop-123\n")
    with pytest.raises(MisspeltSetting, match=rf"^{name.upper()} \(set in {env}\) is not a Herald setting and looks like a key"):
        Settings(_env_file=env)


@pytest.mark.parametrize("name", ["HERALD_MAX_PROMPT_TOKENS", "HERALD_SOMETHING_ELSE", "HERALD_LOG_STYLE",
                                  "HERALD_TOKENIZER", "HERALD_AUTHOR", "HERALD_MONKEY", "HERALD_OAUTH_ENABLED",
                                  "HERALD_AUTH_SERVICE_HOST", "HERALD_AUTH_SERVICE_PORT", "HERALD_AUTH_PORT_8080_TCP_ADDR"])
def test_an_unknown_name_that_is_no_key_is_only_warned_about(monkeypatch, name):
    # a misremembered token limit counts prompt tokens, it is no credential; key words count only as whole words
    # (HERALD_TOKENIZER stopped a start), and the service links of a sibling Service named herald-auth are links
    # (its pods would have crash-looped: re-tester)
    monkeypatch.setenv(name, "1")
    assert Settings(_env_file=None).start_up_warnings()[0] == f"{name} (set in the environment) is not a Herald setting and is ignored"


def test_other_unknown_names_are_warned_about_and_kubernetes_service_links_are_not(monkeypatch):
    monkeypatch.setenv("HERALD_SOMETHING_ELSE", "1")
    for name in ("HERALD_SERVICE_HOST", "HERALD_SERVICE_PORT", "HERALD_SERVICE_PORT_HTTP", "HERALD_PORT_8000_TCP",
                 "HERALD_PORT_8000_TCP_ADDR", "HERALD_PORT_8000_TCP_PROTO", "HERALD_PORT_8000_TCP_PORT"):
        monkeypatch.setenv(name, "10.0.0.1")
    warnings = Settings(_env_file=None).start_up_warnings()
    assert warnings == [
        "HERALD_SOMETHING_ELSE (set in the environment) is not a Herald setting and is ignored",
        "no HERALD_API_KEYS: /classify, /v1/moderations and /v1/info answer anyone who can reach 127.0.0.1:8000",
    ]
    assert Settings(api_keys="key-one-abcdefgh", _env_file=None).start_up_warnings() == warnings[:1]


def test_the_fake_backend_is_warned_about_at_start_up():
    # tester: left on in a ConfigMap, it answered "How do I make methamphetamine at home?" as allowed, logged at INFO
    (warning,) = Settings(api_keys="key-one-abcdefgh", fake_backend=True, _env_file=None).start_up_warnings()
    assert warning.startswith("HERALD_FAKE_BACKEND is on: verdicts come from a weight-free fake backbone"), warning


def test_a_steer_key_with_steering_off_is_warned_about_at_start_up():
    # a key stored in the Secret while /steer answers 404 said nothing (tester)
    key = "key-one-abcdefgh"
    (warning,) = Settings(api_keys=key, steer_api_key="steer-key-0123456789", _env_file=None).start_up_warnings()
    assert warning == "HERALD_STEER_API_KEY is set but HERALD_STEER_ENABLED is false: /steer answers 404"
    assert Settings(api_keys=key, steer_api_key="steer-key-0123456789", steer_enabled=True,
                    _env_file=None).start_up_warnings() == []


def test_a_connection_bound_the_file_descriptor_limit_would_cut_first_is_warned_about(monkeypatch):
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))  # a common default soft limit
    key = "key-one-abcdefgh"
    (warning,) = Settings(api_keys=key, _env_file=None).start_up_warnings()  # the default bound: 1,000
    assert warning.startswith("HERALD_MAX_CONNECTIONS (1000) is not below the process's file descriptor limit (1024,"
                              " ulimit -n) by 64: past about 960 connections none is accepted"), warning
    assert Settings(api_keys=key, max_connections=960, _env_file=None).start_up_warnings() == []
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert Settings(api_keys=key, _env_file=None).start_up_warnings() == []


def test_serve_raises_the_soft_descriptor_limit_up_to_the_hard_one(monkeypatch):
    import resource

    from herald_service.cli.serve import raise_descriptor_limit

    calls = []
    monkeypatch.setattr(resource, "setrlimit", lambda which, limits: calls.append(limits))
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 4096))
    raise_descriptor_limit(1064)  # the default bound and reserve: past the common soft limit of 1,024
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 1030))
    raise_descriptor_limit(1064)  # only up to the hard limit, never past it
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1024, 1024))
    raise_descriptor_limit(1064)  # nothing to raise
    monkeypatch.setattr(resource, "getrlimit", lambda which: (20000, 20000))
    raise_descriptor_limit(1064)  # already enough
    assert calls == [(1064, 4096), (1030, 1030)]


def test_herald_serve_exits_on_a_misspelt_setting_before_loading_anything():
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    out = subprocess.run([sys.executable, "-m", "herald_service", "serve"], capture_output=True, text=True, timeout=60,
                         env={**env, "HERALD_APIKEYS": "abcdefghijklmnop-123", "HERALD_PORT": "8141"})
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("herald: HERALD_APIKEYS (set in the environment) is not a setting; did you mean HERALD_API_KEYS?")


def test_herald_version_prints_the_package_version():
    import subprocess
    import sys

    from herald_service import __version__

    out = subprocess.run([sys.executable, "-m", "herald_service", "--version"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout == f"herald {__version__}\n"


SECRET_SETTINGS = {"HERALD_API_KEYS", "HERALD_STEER_API_KEY"}
CONFIGMAP_OVERRIDES = {"HERALD_HOST", "HERALD_CACHE_DIR", "HERALD_NUM_THREADS", "HERALD_HEALTH_PORT", "HERALD_LOG_FORMAT"}
"""The settings k8s/configmap.yaml sets on purpose to other than config.py's default (its comments say why)."""


def test_the_configmap_sets_every_non_secret_setting_at_its_default_unless_it_says_why():
    # It claimed "every non-secret HERALD_* setting" but lacked ten, and set HERALD_BATCH_DELAY_MS 2.0 against a
    # default of 0 chosen by benchmark (tester).
    import yaml

    data = yaml.safe_load((Path(__file__).parents[1] / "k8s" / "configmap.yaml").read_text(encoding="utf-8"))["data"]
    names = {f"HERALD_{field.upper()}" for field in Settings.model_fields}
    assert set(data) == names - SECRET_SETTINGS
    defaults = Settings(_env_file=None)
    differ = set()
    for name, value in data.items():
        field = name.removeprefix("HERALD_").lower()
        assert isinstance(value, str), name
        if getattr(Settings(_env_file=None, **{field: value}), field) != getattr(defaults, field):
            differ.add(name)
    assert differ == CONFIGMAP_OVERRIDES


def test_the_readme_names_every_setting():
    readme = (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    missing = [f"HERALD_{field.upper()}" for field in Settings.model_fields if f"`HERALD_{field.upper()}`" not in readme]
    assert not missing


def test_every_serve_setting_has_a_help_text():
    assert [field for field, info in Settings.model_fields.items() if not info.description] == []


@pytest.mark.parametrize("given", ["INFO", "Info", "info"])
def test_the_log_level_is_read_in_any_letter_case(monkeypatch, given):
    monkeypatch.setenv("HERALD_LOG_LEVEL", given)
    assert Settings(_env_file=None).log_level == "info"


def test_every_choice_of_words_is_read_in_any_letter_case(monkeypatch):
    # tester: HERALD_LOG_LEVEL=WARNING was accepted, HERALD_DEVICE=CPU, HERALD_SCORE_MESSAGES=ALL and
    # HERALD_PREFILL_CHUNK_TOKENS=AUTO refused
    for name, given, expected in (("device", "CPU", "cpu"), ("score_messages", "All", "all"),
                                  ("prefill_chunk_tokens", "AUTO", "auto"), ("matmul_dtype", "Weights", "weights"),
                                  ("padding_side", "RIGHT", "right")):
        monkeypatch.setenv(f"HERALD_{name.upper()}", given)
        assert getattr(Settings(_env_file=None), name) == expected, name
        monkeypatch.delenv(f"HERALD_{name.upper()}")
    monkeypatch.setenv("HERALD_BACKBONE", "/models/MyModel")  # a path is not a choice: kept as given
    assert Settings(_env_file=None).backbone == "/models/MyModel"


def test_a_chunk_size_that_is_no_number_is_one_line_naming_the_choices(monkeypatch):
    monkeypatch.setenv("HERALD_PREFILL_CHUNK_TOKENS", "off")
    with pytest.raises(ValueError) as caught:
        Settings(_env_file=None)
    assert [e["msg"] for e in caught.value.errors()] == [
        "Value error, must be 0 (off), auto, or a whole number of tokens from 16 to 1,048,576, got 'off'"]


def test_an_empty_steer_key_is_unset_with_steering_off_and_refused_with_it_on(monkeypatch):
    # k8s/secret.example.yaml said an empty key "is an invalid key and stops the pod" even with steering off (tester).
    monkeypatch.setenv("HERALD_STEER_API_KEY", "")
    assert Settings(_env_file=None).steer_api_key is None
    monkeypatch.setenv("HERALD_STEER_ENABLED", "true")
    with pytest.raises(ValidationError, match="HERALD_STEER_ENABLED needs HERALD_STEER_API_KEY"):
        Settings(_env_file=None)
    monkeypatch.setenv("HERALD_STEER_ENABLED", "false")
    monkeypatch.setenv("HERALD_STEER_API_KEY", "changeme")
    with pytest.raises(ValidationError, match="HERALD_STEER_API_KEY: API keys must be at least 12 characters"):
        Settings(_env_file=None)


def test_settings_whose_empty_value_is_unset_take_whitespace_alone_as_unset_too(monkeypatch):
    # one helper for each of them: HERALD_HEALTH_PORT=" " was refused while "" was unset (tester)
    monkeypatch.setenv("HERALD_PROBE", "  ")
    monkeypatch.setenv("HERALD_STEER_API_KEY", " ")
    settings = Settings(_env_file=None)
    assert settings.probe is None and settings.steer_api_key is None
    assert Settings(_env_file=None, probe=" ", steer_api_key="\t").probe is None


def test_the_health_port_is_off_by_default_set_by_its_name_and_never_the_main_port(monkeypatch):
    # The operations listener (tester: probes and scrapes shared HERALD_MAX_CONNECTIONS with the flood they watch)
    assert Settings(_env_file=None).health_port is None
    monkeypatch.setenv("HERALD_HEALTH_PORT", "")  # a ConfigMap's empty value: unset
    assert Settings(_env_file=None).health_port is None
    monkeypatch.setenv("HERALD_HEALTH_PORT", "8001")
    assert Settings(_env_file=None).health_port == 8001
    assert Settings(_env_file=None, health_port="").health_port is None  # --health-port "" too
    monkeypatch.setenv("HERALD_HEALTH_PORT", " \t")  # whitespace alone is unset as "" is (it was refused: tester)
    assert Settings(_env_file=None).health_port is None
    monkeypatch.delenv("HERALD_HEALTH_PORT")
    assert Settings(_env_file=None, health_port="  ").health_port is None
    for bad in (0, 65536, "eighty"):
        with pytest.raises(ValidationError, match="health_port"):
            Settings(_env_file=None, health_port=bad)
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None, port=9000, health_port=9000)
    assert ("health_port (HERALD_HEALTH_PORT, --health-port) is 9000, the same as port (HERALD_PORT, --port)"
            in str(refused.value)), refused.value


def test_the_health_port_adds_its_own_connections_to_the_descriptors_serve_keeps(monkeypatch):
    import resource

    from herald_service.config import FILE_DESCRIPTOR_RESERVE, HEALTH_PORT_CONNECTIONS

    key = "key-one-abcdefgh"
    assert Settings(api_keys=key, _env_file=None).file_descriptors_needed() == 1000 + FILE_DESCRIPTOR_RESERVE
    with_health = Settings(api_keys=key, health_port=8001, _env_file=None)
    assert with_health.file_descriptors_needed() == 1000 + FILE_DESCRIPTOR_RESERVE + HEALTH_PORT_CONNECTIONS
    monkeypatch.setattr(resource, "getrlimit", lambda which: (1100, 4096))  # enough for 1,064, not for 1,128
    assert Settings(api_keys=key, _env_file=None).start_up_warnings() == []
    (warning,) = with_health.start_up_warnings()
    assert warning.startswith("HERALD_MAX_CONNECTIONS (1000) is not below the process's file descriptor limit (1100,"
                              " ulimit -n) by 128: past about 972 connections"), warning


@pytest.mark.parametrize(("name", "bound"), [
    ("max_chars", 10_000_000), ("max_tokens", 1_048_576), ("max_batch_size", 4096), ("batch_max_prompts", 4096),
    ("max_messages", 65_536), ("queue_capacity", 1_048_576), ("max_connections", 1_000_000),
    ("steer_max_concurrent", 1024), ("max_header_bytes", 16 * 1024 * 1024), ("max_buffered_body_bytes", 2**48),
])
def test_count_settings_have_an_upper_bound_named_in_the_error(monkeypatch, name, bound):
    # tester: HERALD_MAX_CHARS=99999999999999999999 and a queue of 10^21 prompts were accepted
    monkeypatch.setenv(f"HERALD_{name.upper()}", str(bound + 1))
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None)
    [error] = refused.value.errors()
    assert (error["loc"], error["msg"]) == ((name,), f"Input should be less than or equal to {bound}")
    monkeypatch.setenv(f"HERALD_{name.upper()}", "99999999999999999999")
    with pytest.raises(ValidationError, match=f"less than or equal to {bound}"):
        Settings(_env_file=None)
    monkeypatch.setenv(f"HERALD_{name.upper()}", str(bound))
    # a request at the limit must fit in the queue, with up to three trimmed views per prompt
    extra = {"queue_capacity": 4 * bound} if name == "max_batch_size" else {}
    if name in ("max_chars", "max_batch_size"):  # the bodies in progress must hold one body at the size limit
        extra["max_buffered_body_bytes"] = 2**48
    assert getattr(Settings(_env_file=None, **extra), name) == bound


@pytest.mark.parametrize(("name", "value", "error"), [
    ("batch_token_budget", 16_777_217, "must be auto or a whole number of tokens from 64 to 16,777,216, got 16777217"),
    ("prefill_chunk_tokens", 1_048_577, "must be 0 (off), auto, or a whole number of tokens from 16 to 1,048,576, got 1048577"),
])
def test_the_token_settings_that_also_take_auto_have_an_upper_bound_too(monkeypatch, name, value, error):
    monkeypatch.setenv(f"HERALD_{name.upper()}", str(value))
    with pytest.raises(ValidationError) as refused:
        Settings(_env_file=None)
    [found] = refused.value.errors()
    assert (found["loc"], found["msg"]) == ((name,), f"Value error, {error}")


def test_a_request_at_the_batch_limit_with_its_trimmed_views_must_fit_in_the_queue():
    # each prompt may be scored with up to three trimmed views (HERALD_TRIMMED_VIEWS): 512 prompts could need 2,048
    # places in a queue of 1,024, a 429 on an idle server for ever
    with pytest.raises(ValidationError) as caught:
        Settings(_env_file=None, max_batch_size=257)
    message = str(caught.value)
    assert "max_batch_size (257, HERALD_MAX_BATCH_SIZE) x 4 must not exceed queue_capacity (1024" in message
    assert "HERALD_TRIMMED_VIEWS=false" in message
    assert Settings(_env_file=None, max_batch_size=256).max_batch_size == 256  # 4 x 256 fits
    assert Settings(_env_file=None, max_batch_size=512, trimmed_views=False).max_batch_size == 512
    assert Settings(_env_file=None, max_batch_size=512, queue_capacity=2048).queue_capacity == 2048
