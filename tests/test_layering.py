"""Dependencies point one way (DESIGN section 4): checked on a fresh interpreter's sys.modules."""

import subprocess
import sys


def modules_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print('\\n'.join(sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_probes_never_import_transformers_or_fastapi():
    loaded = modules_after("import herald_service.probes.probe, herald_service.probes.artifact")
    assert "transformers" not in loaded
    assert "fastapi" not in loaded


def test_serving_path_does_not_import_training_code():
    loaded = modules_after("import herald_service.api.app, herald_service.engine.runtime")
    assert not any(m.startswith("herald_service.training") for m in loaded)
    assert not any(m.startswith("herald_service.analysis") for m in loaded)


def test_only_the_api_layer_imports_fastapi():
    loaded = modules_after("import herald_service.engine.engine, herald_service.engine.service, herald_service.backbone.hf")
    assert "fastapi" not in loaded and "starlette" not in loaded


def test_local_commands_name_a_bad_prompt_file_or_out_before_importing_torch(tmp_path):
    # `herald classify --file missing.txt` took 5-6 s to say so: torch was imported before the file was read
    for args in (["classify", "--file", str(tmp_path / "missing.txt")], ["steer-eval", str(tmp_path / "missing.txt")],
                 ["plot", "hi", "--out", str(tmp_path / "no" / "t.png")]):
        loaded = modules_after(f"from herald_service.cli import main\ntry:\n    main({args!r})\nexcept SystemExit: pass")
        assert "torch" not in loaded and "herald_service.cli" in loaded, args


def test_fit_eval_and_recipes_name_a_missing_data_file_or_backbone_before_importing_torch(tmp_path):
    # `herald fit --backbone /nope` read and folded the whole corpus (28 s) and imported torch before saying so
    for command in ("fit", "eval", "recipes"):
        for args in (["--data", str(tmp_path / "missing.jsonl")], ["--backbone", str(tmp_path / "no-model")]):
            loaded = modules_after(f"from herald_service.cli import main\ntry:\n    main({[command, *args]!r})\n"
                                   "except SystemExit: pass")
            assert "torch" not in loaded and "herald_service.cli" in loaded, (command, args)
