"""The wheels crossmod needs on a GPU node beyond what the node's base image already holds, for nodes with no package index.

    make wheelhouse BASE=<the node's `pip list --format=freeze`> [PYTHON_VERSION=3.12] [PLATFORM=manylinux_2_28_x86_64]
                    [EXTRAS=deepspeed] [BUDGET_MIB=60]
    python scripts/wheelhouse.py --base FREEZE [--python-version 3.12] [--platform manylinux_2_28_x86_64 …]
                                 [--extras deepspeed …] [--replace NAME …] [--budget-mib 60] [--out wheelhouse]
                                 [pip's own index options after `--`, e.g. -- --no-index --find-links DIR]

Then on the node: `pip install --no-index --find-links wheelhouse --target <dir> crossmod` (docs/cluster.md).

Why each step:
- crossmod's own wheel is built here (`pip wheel --no-deps`), and its requirements (with the `--extras` asked for) are
  resolved by pip for the node's Python and platform (`--python-version`, `--platform`, wheels only: a node without an
  index has no compiler toolchain to trust).
- The base image's packages enter pip's resolution as metadata-only stand-ins at exactly their installed versions
  (local labels such as `+cu130` included, which no index serves), so pip keeps what the node has and adds only what is
  missing. A base package whose version is outside a range crossmod states (a too-old transformers, say) is left out of
  the stand-ins and comes as a wheel, and the table says why; `--replace NAME` does the same for a package another
  requirement needs in another version (pip's conflict message names it).
- A freeze line without a version (`name`) is taken as present at a version the freeze did not record, compatible with
  the one pip resolves: not fetched, and listed as assumed (record the whole `pip list` to make nothing assumed).
- Optional parts (W&B, Optuna sweeps, the OCR engine, DeepSpeed, …) are extras of setup.cfg and stay out unless asked.
- The wheels are fetched into a temporary folder, counted, and moved into `--out` only within the budget; over it,
  nothing is written and the exit status is 2. `--out` gets `manifest.json`: the target, the base file's SHA-256, each
  wheel with its size, SHA-256 and reason.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = "crossmodbase"  # the local-version label that marks a base package's metadata-only stand-in
DEFAULT_PLATFORM = "manylinux_2_28_x86_64"


def compatible_platforms(platform: str) -> tuple[str, ...]:
    """A manylinux tag and every older one a node of that glibc also runs (pip matches `--platform` tags exactly)."""
    head, _, rest = platform.partition("manylinux_2_")
    if head or not rest:
        return (platform,)
    glibc, arch = rest.split("_", 1)
    newer = [f"manylinux_2_{minor}_{arch}" for minor in range(int(glibc), 16, -1)]
    return (*newer, f"manylinux2014_{arch}", f"manylinux2010_{arch}", f"manylinux1_{arch}")


class WheelhouseError(Exception):
    """A wheelhouse that cannot be made as asked: one sentence naming the file, package or step."""


@dataclass(frozen=True)
class Target:
    """The node's interpreter and platform, as pip's cross-platform options and PEP 508 markers see them."""

    python_version: str
    platforms: tuple[str, ...]

    def pip_options(self) -> list[str]:
        options = ["--python-version", self.python_version, "--implementation", "cp", "--only-binary=:all:"]
        for platform in self.platforms:
            options += ["--platform", platform]
        return options

    def markers(self, extra: str = "") -> dict[str, str]:
        machine = self.platforms[0].split("_", 3)[-1] if self.platforms[0].startswith("manylinux_") else "x86_64"
        return {
            "python_version": self.python_version,
            "python_full_version": f"{self.python_version}.0",
            "implementation_name": "cpython",
            "platform_python_implementation": "CPython",
            "sys_platform": "linux",
            "platform_system": "Linux",
            "os_name": "posix",
            "platform_machine": machine,
            "extra": extra,
        }


PACKAGE_NAME = re.compile(r"^([A-Z0-9]|[A-Z0-9][A-Z0-9._-]*[A-Z0-9])$", re.IGNORECASE)  # PEP 508's name, as packaging reads it


def read_base(path: Path) -> dict[str, str | None]:
    """The base image's packages, canonical name → version (None: listed without one), from `pip list --format=freeze`."""
    base: dict[str, str | None] = {}
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep and any(mark in line for mark in "@=<>~! "):
            raise WheelhouseError(f"{path}:{number}: {raw.strip()!r} is not `name==version` or `name` (use `pip list --format=freeze`)")
        if not PACKAGE_NAME.match(name.strip()):  # a name becomes a file name of the wheelhouse: no path, URL or `..`
            raise WheelhouseError(f"{path}:{number}: {name.strip()!r}"[:200] + " is not a package name (use `pip list --format=freeze`)")
        try:
            base[canonicalize_name(name.strip())] = str(Version(version.strip())) if sep else None
        except InvalidVersion:
            raise WheelhouseError(f"{path}:{number}: {version.strip()!r} is not a version") from None
    return base


def build_own_wheel(folder: Path) -> Path:
    """crossmod's wheel, built from this checkout without touching it (a copy, so no build/ folder is left behind)."""
    source = folder / "source"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, tracked):
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    command = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", "-w", str(folder), str(source)]
    subprocess.run(command, check=True, capture_output=True)
    shutil.rmtree(source)
    (wheel,) = folder.glob("crossmod-*.whl")
    return wheel


def requirements_of(wheel: Path, extras: list[str], target: Target) -> dict[str, Requirement]:
    """The wheel's requirements that apply on the target with the extras asked for, by canonical name."""
    with zipfile.ZipFile(wheel) as archive:
        (metadata_name,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    declared = {canonicalize_name(e) for e in metadata.get_all("Provides-Extra") or []}
    unknown = sorted(set(map(canonicalize_name, extras)) - declared)
    if unknown:
        raise WheelhouseError(f"no extra {', '.join(unknown)} in crossmod (setup.cfg declares: {', '.join(sorted(declared))})")
    wanted: dict[str, Requirement] = {}
    for line in metadata.get_all("Requires-Dist") or []:
        requirement = Requirement(line)
        applies = requirement.marker is None or any(requirement.marker.evaluate(target.markers(extra)) for extra in ["", *extras])
        if applies:
            wanted[canonicalize_name(requirement.name)] = requirement
    return wanted


def outdated(base: dict[str, str | None], wanted: dict[str, Requirement]) -> dict[str, str]:
    """Base packages whose version lies outside the range crossmod states: name → why, for the table."""
    return {
        name: f"base has {base[name]}, crossmod needs {requirement.specifier}"
        for name, requirement in wanted.items()
        if base.get(name) and not requirement.specifier.contains(base[name], prereleases=True)
    }


def stand_in_version(version: str) -> str:
    """A base version with the stand-in label: `2.11.0` → `2.11.0+crossmodbase`, `2.11.0+cu130` → `2.11.0+cu130.crossmodbase`.
    Equal to the base's version for every `==`, `>=` and `<` a requirement states, and served by no index."""
    return f"{version}{'.' if '+' in version else '+'}{STAND_IN}"


def write_stand_in(folder: Path, name: str, version: str) -> None:
    """A metadata-only wheel of a base package: pip resolves against it and never fetches the real one."""
    stem = f"{name.replace('-', '_')}-{stand_in_version(version)}"
    files = {
        f"{stem}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {stand_in_version(version)}\n",
        f"{stem}.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: crossmod-wheelhouse\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in files) + f"{stem}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(folder / f"{stem}-py3-none-any.whl", "w") as archive:
        for path, text in {**files, f"{stem}.dist-info/RECORD": record}.items():
            archive.writestr(path, text)


def hold_base(pins: dict[str, str], folder: Path) -> list[str]:
    """pip options that hold the base's pinned packages at metadata-only stand-ins of their versions."""
    stand_ins, constraints = folder / "base", folder / "base-constraints.txt"
    stand_ins.mkdir(parents=True)
    for name, version in pins.items():
        write_stand_in(stand_ins, name, version)
    constraints.write_text("".join(f"{name}=={stand_in_version(version)}\n" for name, version in sorted(pins.items())))
    return ["--find-links", str(stand_ins), "-c", str(constraints)]


def resolve(wheel: Path, extras: list[str], held: list[str], target: Target, sources: list[str], work: Path) -> list[dict]:
    """pip's installation report for crossmod on the target with the base held, from `sources` (pip index options)."""
    report = work / "report.json"
    requirement = f"{wheel}[{','.join(extras)}]" if extras else str(wheel)
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--report", str(report)]
    command += ["--target", str(work / "never-written"), *target.pip_options(), *held]
    done = subprocess.run([*command, *sources, requirement], capture_output=True, text=True)
    if done.returncode:
        said = (done.stdout + done.stderr).strip()
        cause = said.split("The conflict is caused by:", 1)[1].split("To fix this", 1)[0] if "The conflict is caused by:" in said else ""
        tail = "\n".join((cause.strip().splitlines() or said.splitlines())[-12:])
        raise WheelhouseError(
            f"pip could not resolve crossmod for Python {target.python_version} on {target.platforms[0]} with the base held:\n{tail}\n"
            "A base package that another requirement needs in another version can be replaced: --replace NAME"
        )
    return json.loads(report.read_text())["install"]


# Requirements the index publishes as sdists only, for which a pure-Python wheel is made here (`pip wheel`, no compiler):
# hydra-core pins antlr4-python3-runtime 4.9.*; DeepSpeed (EXTRAS=deepspeed) builds with its ops left to JIT on the node.
MADE_HERE = {"antlr4-python3-runtime": "antlr4-python3-runtime==4.9.*", "deepspeed": "deepspeed"}


def make_pure_wheels(wanted: dict[str, Requirement], held: dict[str, str], index: list[str], folder: Path) -> None:
    """Wheels of MADE_HERE's requirements the base does not hold (DeepSpeed only when asked); refused unless pure
    Python (`none-any`)."""
    folder.mkdir()
    needed = {name: spec for name, spec in MADE_HERE.items() if name not in held and (name != "deepspeed" or name in wanted)}
    requirements = [f"{name}{wanted[name].specifier}" if name in wanted else spec for name, spec in needed.items()]  # no marker
    env = {**os.environ, "DS_BUILD_OPS": "0"}  # DeepSpeed's ops are compiled where they run, at first use
    for requirement in requirements:
        command = [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(folder),
            *index,
            requirement,
        ]
        done = subprocess.run(command, capture_output=True, text=True, env=env)
        if done.returncode:
            raise WheelhouseError(f"could not make a wheel of {requirement}: {done.stderr.strip().splitlines()[-1:]}")
    for wheel in folder.glob("*.whl"):
        if not wheel.name.endswith("-none-any.whl"):
            raise WheelhouseError(f"{wheel.name} is not pure Python: it would run only on this machine's platform")


def fetch(items: list[dict], target: Target, index: list[str], made_here: Path, folder: Path) -> None:
    """Download exactly the resolved wheels (no dependencies of their own: the resolution already chose them); the
    ones made here are copied."""
    for item in items:
        local = Path(item["download_info"]["url"].removeprefix("file://"))
        if local.parent == made_here:
            shutil.copy2(local, folder / local.name)
    pinned = [
        f"{item['metadata']['name']}=={item['metadata']['version']}"
        for item in items
        if not (folder / Path(item["download_info"]["url"]).name).exists()
    ]
    if pinned:
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(folder), *target.pip_options()]
        subprocess.run([*command, *index, *pinned], check=True, capture_output=True)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make(args: argparse.Namespace) -> dict:
    """Build the wheelhouse as the module docstring says; returns the manifest (also written to `--out`)."""
    target = Target(args.python_version, tuple(p for given in args.platform or [DEFAULT_PLATFORM] for p in compatible_platforms(given)))
    base = read_base(args.base)
    out: Path = args.out
    if out.exists() and any(out.iterdir()) and not (out / "manifest.json").is_file():
        raise WheelhouseError(f"{out} holds files that are not a wheelhouse of this tool (no manifest.json): give another --out")
    with tempfile.TemporaryDirectory(prefix="crossmod-wheelhouse-") as tmp:
        work = Path(tmp)
        wheels = work / "wheels"
        wheels.mkdir()
        own = build_own_wheel(wheels)
        wanted = requirements_of(own, args.extras, target)
        reasons = outdated(base, wanted) | {canonicalize_name(n): "replaced on request (--replace)" for n in args.replace}
        pins = {name: version for name, version in base.items() if version and name not in reasons and name != "crossmod"}
        made_here = work / "made-here"
        make_pure_wheels(wanted, pins, args.pip, made_here)
        resolved = resolve(own, args.extras, hold_base(pins, work / "held"), target, [*args.pip, "--find-links", str(made_here)], work)
        needed, assumed = [], []
        for item in resolved:
            name = canonicalize_name(item["metadata"]["name"])
            if name == "crossmod":
                continue
            if name in base and name not in reasons:
                if base[name] is None:
                    assumed.append(name)
                    pins[name] = item["metadata"]["version"]  # the base's copy is taken to be compatible with this one
                continue  # held at its stand-in, or present at an unrecorded version
            needed.append(item)
        fetch(needed, target, args.pip, made_here, wheels)
        # the proof that the node needs nothing else: the same resolution with no index, from the base and these wheels
        resolve(own, args.extras, hold_base(pins, work / "verify"), target, ["--no-index", "--find-links", str(wheels)], work)
        rows = []
        for path in sorted(wheels.glob("*.whl")):
            name = canonicalize_name(path.name.split("-")[0])
            reason = "crossmod itself" if name == "crossmod" else reasons.get(name, "not in the base")
            if (made_here / path.name).exists():
                reason += "; a pure-Python wheel made here (the index has its sdist only)"
            rows.append({"file": path.name, "bytes": path.stat().st_size, "sha256": sha256(path), "reason": reason})
        total, budget = sum(row["bytes"] for row in rows), int(args.budget_mib * 2**20)
        manifest = {
            "python_version": target.python_version,
            "platforms": list(target.platforms),
            "extras": args.extras,
            "base": {"file": str(args.base), "sha256": sha256(args.base), "packages": len(base)},
            "assumed_present_unversioned": sorted(assumed),
            "wheels": rows,
            "offline_install_resolves": True,  # checked above: no index, the base held, these wheels
            "total_bytes": total,
            "budget_bytes": budget,
        }
        _print_table(manifest)
        if total > budget:
            raise WheelhouseError(
                f"refused: {total / 2**20:.1f} MiB is over the budget of {args.budget_mib:g} MiB; nothing was written to {out} "
                "(leave extras out, or raise --budget-mib)"
            )
        staged = out.parent / f".{out.name}.new"
        shutil.rmtree(staged, ignore_errors=True)
        shutil.copytree(wheels, staged)
        (staged / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        shutil.rmtree(out, ignore_errors=True)
        staged.rename(out)
    return manifest


def _print_table(manifest: dict) -> None:
    print(f"wheelhouse for Python {manifest['python_version']} on {manifest['platforms'][0]} beyond {manifest['base']['file']}:")
    for row in manifest["wheels"]:
        print(f"  {row['bytes'] / 2**20:8.2f} MiB  {row['file']}  ({row['reason']})")
    if manifest["assumed_present_unversioned"]:
        print(f"  assumed present (in the base without a version): {', '.join(manifest['assumed_present_unversioned'])}")
    print(f"  total {manifest['total_bytes'] / 2**20:.2f} MiB of {manifest['budget_bytes'] / 2**20:g} MiB allowed")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    own, pip = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True, help="the node's `pip list --format=freeze`")
    parser.add_argument("--python-version", default="3.12")
    parser.add_argument(
        "--platform", action="append", help=f"the node's platform tag; older manylinux tags are added (default: {DEFAULT_PLATFORM})"
    )
    parser.add_argument("--extras", nargs="*", default=[], help="setup.cfg extras to bring (default: none)")
    parser.add_argument("--replace", nargs="*", default=[], help="base packages to bring in the version crossmod's requirements resolve to")
    parser.add_argument("--budget-mib", type=float, default=60.0)
    parser.add_argument("--out", type=Path, default=ROOT / "wheelhouse")
    args = parser.parse_args(own)
    args.extras = [e for item in args.extras for e in item.split(",") if e]
    args.pip = pip
    try:
        make(args)
    except WheelhouseError as error:
        print(f"wheelhouse: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
