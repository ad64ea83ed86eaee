"""Where each set of a destination is copied, kept from run to run.

A set's folder is named from the sets the source lists (`harvester.sets`),
so a set the source adds could rename every folder, and a source that listed
one set (copied at the destination's root) gives that set a folder once it
lists two. Either way the copies already made would be left behind, stale,
and copied again. So `<destination>/.resourcesync-sets.json` records the
folder each set was given, and a set keeps it: only a new set is named, apart
from every folder given and every name already at the root. A set copied at
the root moves into the folder it is given (its files renamed, never fetched
again) the first time the source lists more than one. A harvest of one set
(`set:`) uses the same folders, so switching between it and all sets never
copies a set twice.
"""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath

from harvester.sets import clashes, set_folders, with_digest
from harvester.state import LOCK_FILE, STATE_FILE, destination_lock, mirrored_source, write_json
from harvester.walk import HarvestError

LAYOUT_FILE = ".resourcesync-sets.json"
ROOT = PurePosixPath()


def load_layout(destination: Path, at_root: str | None) -> dict[str, PurePosixPath]:
    """The folder each set was given; the copy at the root (`at_root`: one set, or made
    before this file was kept) counts as given the root, unless it is on its way to a
    folder."""
    path = destination / LAYOUT_FILE
    try:
        folders = json.loads(path.read_text(encoding="utf-8"))["folders"]
        layout = {str(url): PurePosixPath(str(folder)) for url, folder in folders.items()}
    except FileNotFoundError:
        layout = {}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise HarvestError(f"{path} is damaged ({error}); move it away to start afresh") from error
    if at_root is not None:
        layout.setdefault(at_root, ROOT)
    return layout


def adopted_folders(destination: Path, urls: list[str]) -> dict[str, PurePosixPath]:
    """Before the layout file was kept, sets had the folders `set_folders` names: those
    holding their set's copy are the sets' folders."""
    if len(urls) < 2 or (destination / LAYOUT_FILE).exists():
        return {}
    return {
        url: folder
        for url, folder in set_folders(urls).items()
        if mirrored_source(destination / folder) == url
    }


def save_layout(destination: Path, layout: dict[str, PurePosixPath]) -> None:
    """Write the layout atomically."""
    destination.mkdir(parents=True, exist_ok=True)
    folders = {url: str(folder) for url, folder in layout.items()}
    write_json(destination / LAYOUT_FILE, {"folders": folders})


def plan_folders(
    urls: list[str], layout: dict[str, PurePosixPath], taken: set[str]
) -> dict[str, PurePosixPath]:
    """A folder for each listed set: the one it was given, if any, else a new one.

    One set, with no set in a folder yet, is copied at the root. A new folder
    is named as `set_folders` names it, apart from every folder given (listed
    or not) and from the names in `taken` (what a copy at the root holds).
    """
    kept = {url: folder for url, folder in layout.items() if folder != ROOT}
    if len(urls) == 1 and not kept:
        return {urls[0]: ROOT}
    taken = taken - {folder.parts[0] for folder in kept.values()}
    named = set_folders(urls) if len(urls) > 1 else {}
    given = list(kept.values())
    plan: dict[str, PurePosixPath] = {}
    for url in urls:
        folder = kept.get(url) or _new_folder(url, named.get(url, ROOT), given, taken)
        given.append(folder)
        plan[url] = folder
    return plan


def _new_folder(
    url: str, named: PurePosixPath, given: list[PurePosixPath], taken: set[str]
) -> PurePosixPath:
    """`named`, or the set's digest name if that clashes; refused if both do."""
    for folder in (named, with_digest(url)):
        if folder != ROOT and not clashes(folder, given, taken):
            return folder
    raise HarvestError(f"cannot give {url} a folder apart from the other sets' ({named})")


def move_root_copy(
    destination: Path, at_root: str | None, layout: dict[str, PurePosixPath]
) -> None:
    """Move the set copied at the root (`at_root`) into the folder the layout now gives it.

    Renames only, the state file last: a run stopped half way finds the state
    still at the root and moves the rest. The root lock keeps a run of that
    set at the root out meanwhile.
    """
    folder = layout.get(at_root or "", ROOT)
    if at_root is None or folder == ROOT:
        return
    target = destination / folder
    if (target / STATE_FILE).exists():
        raise HarvestError(
            f"{at_root} is copied both at {destination} and in {target}: remove one of them"
        )
    keep = {LAYOUT_FILE, LOCK_FILE, *(given.parts[0] for given in layout.values() if given.parts)}
    with destination_lock(destination):
        target.mkdir(parents=True, exist_ok=True)
        entries = [entry for entry in destination.iterdir() if entry.name not in keep]
        for entry in sorted(entries, key=lambda entry: entry.name == STATE_FILE):
            entry.rename(target / entry.name)


def root_names(destination: Path) -> set[str]:
    """The names at the root that a new set's folder must not take."""
    if not destination.is_dir():
        return set()
    return {entry.name for entry in destination.iterdir()} - {LAYOUT_FILE, LOCK_FILE}


def arrange(destination: Path, urls: list[str], *, writes: bool) -> dict[str, PurePosixPath]:
    """The folder of each listed set. A run that writes records new folders and moves a
    copy at the root into its folder; one that does not finds each copy where it is."""
    if len(urls) == 1 and not (destination / LAYOUT_FILE).exists():
        return {urls[0]: ROOT}  # one set never given a folder: no state file read for it
    at_root = mirrored_source(destination)  # once: a large copy's state is tens of MB
    layout = {**adopted_folders(destination, urls), **load_layout(destination, at_root)}
    plan = plan_folders(urls, layout, root_names(destination))
    if not writes:
        return {url: ROOT if url == at_root else folder for url, folder in plan.items()}
    if ROOT not in plan.values():
        if any(plan[url] != layout.get(url) for url in urls):
            save_layout(destination, {**layout, **plan})
        move_root_copy(destination, at_root, {**layout, **plan})
    return plan


def set_folder(destination: Path, urls: list[str], chosen: str, *, writes: bool) -> PurePosixPath:
    """The folder of the one set `set:` names among the `urls` listed: the one a harvest
    of every set gives it; the root while the destination is not laid out per set, where
    a harvest of one set has always kept its copy."""
    if not (destination / LAYOUT_FILE).exists() and not adopted_folders(destination, urls):
        return ROOT
    return arrange(destination, urls, writes=writes)[chosen]
