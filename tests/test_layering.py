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
