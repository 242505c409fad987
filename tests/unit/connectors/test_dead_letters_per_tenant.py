"""Issue 16 (low): the dead letters of every tenant shared one file, and a dead letter's path and
reason can quote a document. Each tenant now has its own file; a reader of one tenant (the CLI with
--tenant, a run over the API) never sees another's; the old shared file is shown by tenant only
for lines that name one, and otherwise only to the operator's unrestricted listing."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from services.connectors.base import (
    ConnectorState,
    DeadLetter,
    dead_letter_records,
    dead_letters_file,
    read_dead_letters,
)
from tests.conftest import create_key

SECRET = "ACME-MERGER-4471"


def letter(path: str, reason: str = "cannot parse") -> DeadLetter:
    return DeadLetter("meetings", path, reason)


def dead_letters_cli(data: Path, capsys, *tenant: str) -> str:
    from services.cli.main import main

    capsys.readouterr()
    assert main(["connect", "dead-letters", "--data", str(data), *(("--tenant", *tenant) if tenant else ())]) == 0
    return capsys.readouterr().out


def test_each_tenant_writes_its_own_private_file_and_reads_only_it(tmp_path):
    data = tmp_path / "data"
    ConnectorState(data, "acme.meetings", tenant="acme").record_dead_letters([letter("/in/acme/a.vtt", SECRET)])
    ConnectorState(data, "globex.email", tenant="globex").record_dead_letters([letter("/in/globex/b.eml")])
    acme, globex = dead_letters_file(data, "acme"), dead_letters_file(data, "globex")
    assert acme != globex and acme.is_file() and globex.is_file()
    assert SECRET in acme.read_text() and SECRET not in globex.read_text()
    assert not (data / "connectors" / "dead_letters.jsonl").exists()
    for path in (acme, globex):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(acme.parent.stat().st_mode) == 0o700
    assert [d.path for d in read_dead_letters(data, "globex")] == ["/in/globex/b.eml"]
    assert [d.path for d in read_dead_letters(data, "acme")] == ["/in/acme/a.vtt"]
    assert read_dead_letters(data, "initech") == []
    assert {(t, d.path) for t, d in dead_letter_records(data)} == {("acme", "/in/acme/a.vtt"),
                                                                   ("globex", "/in/globex/b.eml")}


def test_a_tenant_name_cannot_lead_its_file_elsewhere_nor_read_a_file_it_maps_to(tmp_path):
    data = tmp_path / "data"
    ConnectorState(data, "x", tenant="../../keys").record_dead_letters([letter("/in/x", SECRET)])
    [written] = (data / "connectors" / "dead_letters").iterdir()
    assert written.parent == data / "connectors" / "dead_letters" and written.name.endswith(".jsonl")
    # A tenant whose name is the mapped file name reads the file but not the lines: each line names its tenant.
    assert read_dead_letters(data, written.stem) == [] and len(read_dead_letters(data, "../../keys")) == 1


def test_the_legacy_shared_file_is_shown_by_tenant_only_where_a_line_names_it(tmp_path, capsys):
    data = tmp_path / "data"
    legacy = data / "connectors" / "dead_letters.jsonl"
    legacy.parent.mkdir(parents=True)
    old = letter("/in/acme/old.vtt", SECRET)
    tagged = letter("/in/globex/tagged.eml")
    legacy.write_text(json.dumps(old.__dict__) + "\n" + json.dumps(tagged.__dict__ | {"tenant": "globex"}) + "\n")
    assert read_dead_letters(data, "globex") == [tagged]
    assert read_dead_letters(data, "acme") == []  # an untagged line is nobody's for sure
    assert read_dead_letters(data) == [old, tagged]
    assert SECRET not in dead_letters_cli(data, capsys, "acme")
    everything = dead_letters_cli(data, capsys)
    assert SECRET in everything and "(legacy, no tenant)" in everything and "globex  meetings" in everything


def test_cli_with_tenant_lists_that_tenants_letters_only(tmp_path, capsys):
    data = tmp_path / "data"
    ConnectorState(data, "acme.meetings", tenant="acme").record_dead_letters([letter("/in/acme/a.vtt", SECRET)])
    ConnectorState(data, "globex.meetings", tenant="globex").record_dead_letters([letter("/in/globex/b.vtt")])
    globex = dead_letters_cli(data, capsys, "globex")
    assert "/in/globex/b.vtt" in globex and SECRET not in globex and "/in/acme" not in globex
    assert "/in/acme/a.vtt" in dead_letters_cli(data, capsys, "acme")


@pytest.mark.slow
def test_over_the_api_a_writer_of_another_tenant_never_sees_this_tenants_dead_letters(
        live_server, settings, capsys):
    data = Path(settings.data_dir)
    acme_inbox, globex_inbox = data / "inbox" / "default", data / "inbox" / "globex"
    for inbox, body in ((acme_inbox, f"{SECRET} is not a cue"), (globex_inbox, "nor is this")):
        inbox.mkdir(parents=True)
        (inbox / "broken.vtt").write_text(f"WEBVTT\n\n{body}\n\nstill not a cue\n")
    acme = live_server.client.post("/v1/connectors/meetings", json={"paths": [str(acme_inbox)]})
    assert acme.status_code == 200, acme.text
    assert [Path(d["path"]).parent.name for d in acme.json()["dead_letters"]] == ["default"]
    writer = create_key(settings.data_dir, role="writer", tenant="globex", principal="mallory")
    globex = live_server.client.post("/v1/connectors/meetings", json={"paths": [str(globex_inbox)]},
                                     headers={"Authorization": f"Bearer {writer}"})
    assert globex.status_code == 200, globex.text
    assert [Path(d["path"]).parent.name for d in globex.json()["dead_letters"]] == ["globex"]
    assert SECRET not in globex.text and str(acme_inbox) not in globex.text

    assert dead_letters_file(data, "default") != dead_letters_file(data, "globex")
    assert str(acme_inbox) in dead_letters_file(data, "default").read_text()
    assert str(acme_inbox) not in dead_letters_file(data, "globex").read_text()
    assert not (data / "connectors" / "dead_letters.jsonl").exists()
    listed = dead_letters_cli(data, capsys, "globex")
    assert str(globex_inbox) in listed and str(acme_inbox) not in listed
