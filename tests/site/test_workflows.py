"""The GitHub workflows: CI runs the README's test command, Pages deploys the built site.

These check what the workflows say; `make lint` runs actionlint on them where it is installed.
"""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = ROOT / ".github" / "workflows"


def _workflow(name: str) -> dict:
    path = WORKFLOWS / name
    assert path.is_file(), f"{path.relative_to(ROOT)} is missing"
    return yaml.safe_load(path.read_text())


def _triggers(workflow: dict) -> dict:
    on = workflow.get("on", workflow.get(True))  # YAML 1.1 reads a bare `on` as True
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return on or {}


def _steps(workflow: dict):
    for job_id, job in workflow["jobs"].items():
        for step in job.get("steps", []):
            yield job_id, step


def _run_lines(workflow: dict):
    for job_id, step in _steps(workflow):
        for line in step.get("run", "").splitlines():
            yield job_id, line.strip()


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Run every test", 1)[1]
    block = re.search(r"```bash\n(.*?)\n```", section, re.S)
    assert block, "the README's 'Run every test' section has no command"
    return block.group(1).strip()


def test_readme_test_command_is_make_test():
    assert _readme_test_command() == "make test"


def test_ci_runs_the_readme_test_command_on_push_and_pull_request():
    ci = _workflow("ci.yml")
    assert {"push", "pull_request"} <= set(_triggers(ci))
    command = _readme_test_command()
    runs = [line for _, line in _run_lines(ci)]
    assert any(line == command or line.startswith(command + " ") for line in runs), (
        f"no step of ci.yml runs the README's test command {command!r}: {runs}"
    )


def test_ci_runs_the_colab_case():
    ci = _workflow("ci.yml")
    jobs = {job_id for job_id, line in _run_lines(ci) if line.split()[:2] == ["make", "test-colab"]}
    assert jobs, "no step of ci.yml runs make test-colab"
    # whichever job runs it has Python 3.12, Colab's
    for job_id in jobs:
        versions = [
            str(step.get("with", {}).get("python-version", ""))
            for _, step in _steps({"jobs": {job_id: ci["jobs"][job_id]}})
            if str(step.get("uses", "")).startswith("actions/setup-python@")
        ]
        assert any("3.12" in v for v in versions), f"job {job_id} sets up no Python 3.12"


@pytest.mark.parametrize("version", ["3.11", "3.12"])
def test_ci_sets_up_the_pythons_the_test_command_needs(version):
    ci = _workflow("ci.yml")
    versions = " ".join(
        str(step.get("with", {}).get("python-version", ""))
        for _, step in _steps(ci)
        if str(step.get("uses", "")).startswith("actions/setup-python@")
    )
    assert version in versions


def test_pages_builds_the_book_on_main_and_deploys_it():
    pages = _workflow("pages.yml")
    push = _triggers(pages).get("push") or {}
    assert "main" in push.get("branches", []), "pages.yml does not run on pushes to main"
    uses = {str(step.get("uses", "")).split("@")[0]: step for _, step in _steps(pages)}
    for action in ("actions/configure-pages", "actions/upload-pages-artifact",
                   "actions/deploy-pages"):
        assert action in uses, f"pages.yml does not use {action}"
    assert uses["actions/upload-pages-artifact"]["with"]["path"].rstrip("/") == "_build/html"
    assert any(line == "make book" for _, line in _run_lines(pages))
    permissions = pages.get("permissions", {})
    assert permissions.get("pages") == "write" and permissions.get("id-token") == "write"


def test_readme_links_the_site_and_the_badge_of_the_repository_the_book_names():
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    owner, name = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)/?", url).groups()
    readme = (ROOT / "README.md").read_text()
    assert f"https://{owner.lower()}.github.io/{name}/" in readme
    assert f"{url}/actions/workflows/ci.yml/badge.svg" in readme
