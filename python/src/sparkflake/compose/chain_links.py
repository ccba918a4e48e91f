"""Stage 6 of a build: the verification chain over the assembled trees and the prepared top
layer, run before anything is written to the output. Each link is a function over one
``ChainContext``; ``compose.verification`` runs them and names the first that fails."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, partial
from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name

from ..core.digest import sha256_file
from ..core.status import CLAIM_STATUSES
from ..profile.model import Profile
from . import generated, receipt
from .assembly import Assembly, package_elf_files, wheel_interface, wheel_native
from .composition import OVERLAY_PACKAGE, Composition
from .elf import check_machine, elf_machines
from .inputs import FetchedInputs
from .native_interface import PythonScanMemo, missing_ops, python_interface, unresolved_imports
from .patches import expected_post_images, expected_pre_images
from .source_overlay import (
    compare_overlay,
    compare_retained_native,
    package_files,
    package_tree_hashes,
    retained_native_manifest,
)
from .top_layer import PreparedTop, claim_records
from .verification import Link, LinkResult, require_no_problems, run_chain


@dataclass
class ChainContext:
    """What every link reads: the composition, its verified inputs, the assembled trees and
    the prepared top layer."""

    composition: Composition
    fetched: FetchedInputs
    assembly: Assembly
    prepared: PreparedTop

    @property
    def profile(self) -> Profile:
        return self.composition.profile

    @property
    def site(self) -> str:
        """site-packages relative to a tree's root."""
        return self.assembly.site_packages.lstrip("/")

    @property
    def vllm_site(self) -> Path:
        return self.assembly.vllm_tree / self.site

    @cached_property
    def wheel_package_hashes(self) -> dict[str, str]:
        """path -> sha256 of the wheel's own vllm/ tree, walked once for the overlay and the
        patch links (the build's own tree: nothing changes it between two links), listed
        from the walk that validated it when it is a cached tree."""
        package = self.vllm_site / OVERLAY_PACKAGE
        return package_tree_hashes(package, self.assembly.hash_file, self.assembly.walked.under(package))

    @cached_property
    def source_package_files(self) -> dict[str, Path]:
        """path -> file of the overlay source's vllm/ tree, walked once for the patch and
        the native-interface links (from the walk that validated it when it is a cached
        tree)."""
        package = self.assembly.source_root / OVERLAY_PACKAGE
        return package_files(package, self.assembly.walked.under(package))

    @cached_property
    def python_scans(self) -> PythonScanMemo:
        hashes = self.assembly.hashes
        table = None if hashes is None or hashes.table_path is None else (
            hashes.table_path.parent / "python-scan" / f"{OVERLAY_PACKAGE}.json")
        return PythonScanMemo(table, OVERLAY_PACKAGE, self.assembly.hash_file)

    def final_python_files(self) -> dict[str, Path]:
        """vllm/... -> a file holding that path's bytes in the patched source: a patch's
        outcome is the patched copy, every other file the source file it was copied from
        (``write_patched_source``: copy_file_range, size checked). The source tree stays
        put between builds, so its sha256 records (bound to device, inode, size, mtime and
        ctime) answer without reading; the copies are new files on every build and would
        be read and hashed again."""
        files = {f"{OVERLAY_PACKAGE}/{p}": path for p, path in self.source_package_files.items()}
        for path in expected_post_images(self.composition.patch_set):
            patched = self.assembly.patched_source / path.removeprefix(f"{OVERLAY_PACKAGE}/")
            if patched.is_file() and not patched.is_symlink():
                files[path] = patched
            else:
                files.pop(path, None)
        return files


def check_retained_native(context: ChainContext) -> str:
    wheel = context.composition.vllm_wheel
    shipped = wheel_native(context.fetched.paths[wheel.name], wheel.sha256, OVERLAY_PACKAGE, context.assembly.hashes)
    current = retained_native_manifest(
        context.vllm_site, OVERLAY_PACKAGE, wheel_filename=wheel.filename, wheel_sha256=wheel.sha256,
        hash_file=context.assembly.hash_file,
        elf_files=package_elf_files(context.vllm_site / OVERLAY_PACKAGE, context.assembly.cached_trees),
    )
    require_no_problems(compare_retained_native(current, shipped), "retained native files differ from the wheel", "retained-native")
    require_no_problems(
        compare_retained_native(context.assembly.retained_native, shipped),
        "retained-native manifest differs from the wheel",
        "retained-native",
    )
    overlaid_elf = [
        entry["path"] for entry in context.assembly.overlay["entries"]
        if entry["path"] in shipped
    ]
    require_no_problems([f"{p}: overlaid" for p in overlaid_elf], "overlay touches compiled extensions", "retained-native")
    return f"{len(shipped)} ELF files of {wheel.filename} retained byte for byte"


def check_overlay(context: ChainContext) -> str:
    before = {
        f"{OVERLAY_PACKAGE}/{p}": h
        for p, h in context.wheel_package_hashes.items()
    }
    after = dict(before)
    overlay_package = context.assembly.overlay_tree / OVERLAY_PACKAGE
    if overlay_package.is_dir():
        for path, digest in package_tree_hashes(overlay_package).items():
            after[f"{OVERLAY_PACKAGE}/{path}"] = digest
    for path in context.assembly.overlay_deletions:
        after.pop(path, None)
    require_no_problems(compare_overlay(context.assembly.overlay, before, after), "overlay differs from its manifest", "overlay")
    entries = context.assembly.overlay["entries"]
    return f"{len(entries)} overlay changes equal the manifest; every other file of {OVERLAY_PACKAGE}/ unchanged"


def check_patches(context: ChainContext) -> str:
    problems = []
    source_files = {path: context.assembly.hash_file(file) for path, file in context.source_package_files.items()}
    base_files = context.wheel_package_hashes
    first = expected_pre_images(context.composition.patch_set)
    final = expected_post_images(context.composition.patch_set)
    for path, pre in first.items():
        relative = path.removeprefix(f"{OVERLAY_PACKAGE}/")
        actual = source_files.get(relative, base_files.get(relative, ""))
        if actual != pre:
            problems.append(f"{path}: pre-image sha256 expected {pre or 'absent'}, source has {actual or 'absent'}")
    overlay_by_path = {e["path"]: e for e in context.assembly.overlay["entries"]}
    for path, post in final.items():
        patched_file = context.assembly.patched_source / path.removeprefix(f"{OVERLAY_PACKAGE}/")
        actual = sha256_file(patched_file) if patched_file.is_file() else ""
        if actual != post:
            problems.append(f"{path}: post-image sha256 expected {post or 'absent'}, patched source has {actual or 'absent'}")
        entry = overlay_by_path.get(path)
        if entry is not None and entry["target_sha256"] != post:
            problems.append(f"{path}: overlay target {entry['target_sha256']} is not the post-image {post}")
    require_no_problems(problems, "patch anchors", "patches")
    # The patched tree's git tree id and NAR hash were taken from this tree when the
    # overlay manifest was made; the image holds the overlay tree, checked above.
    tree = context.assembly.overlay["patched_source"]["git_tree"]
    count = sum(len(p.anchors) for p in context.composition.patch_set.patches)
    return f"{len(context.composition.patch_set.patches)} patches, {count} anchors: pre- and post-images match; patched tree git {tree}"


def check_native_interface(context: ChainContext) -> str:
    wheel = context.composition.vllm_wheel
    scans = context.python_scans
    retained = wheel_interface(context.vllm_site / OVERLAY_PACKAGE, wheel.sha256, context.assembly.hashes, scans.scan)
    final_files = context.final_python_files()
    final = python_interface(final_files, OVERLAY_PACKAGE, scans.scan)
    scans.save()
    final_uses, final_imports = final.op_uses, final.imports
    image_paths = (set(retained.files) | set(final_files)) - set(context.assembly.overlay_deletions)
    problems = [
        f"{use.path} calls torch.ops.{use.namespace}.{use.op}, which no retained extension registers"
        for use in missing_ops(final_uses, retained.op_uses, retained.registered)
    ] + [
        f"{path} imports {module}, which no file of the image provides (no .py, package or compiled module)"
        for module, path in unresolved_imports(final_imports, retained.imports, image_paths)
    ]
    require_no_problems(problems, "the overlaid Python needs native code the retained extensions lack", "native-interface")
    added_ops = len(set(final_uses) - set(retained.op_uses))
    added_imports = len(set(final_imports) - set(retained.imports))
    return (f"{len(final_uses)} torch.ops uses and {len(final_imports)} vllm imports of the overlaid Python; "
            f"the {added_ops} ops and {added_imports} imports the wheel's Python lacks are provided "
            f"({retained.libraries} retained ELF files)")


def check_source_packages(context: ChainContext) -> str:
    problems = []
    for overlay in context.assembly.package_overlays:
        site_dir = overlay.tree / context.site / overlay.package
        before = {f"{overlay.package}/{p}": h for p, h in package_tree_hashes(site_dir, context.assembly.hash_file).items()}
        after = dict(before)
        written = context.assembly.overlay_tree / overlay.package
        if written.is_dir():
            after.update({f"{overlay.package}/{p}": h for p, h in package_tree_hashes(written).items()})
        for path in overlay.deletions:
            after.pop(path, None)
        problems += compare_overlay(overlay.manifest, before, after)
    require_no_problems(problems, "a source package differs from its manifest", "source-packages")
    return ", ".join(
        f"{o.package}: {len(o.manifest['files_from_source'])} files from {o.manifest['source']['rev'][:12]}, "
        f"{len(o.manifest['files_from_wheel'])} from {o.manifest['wheel']['filename']}"
        for o in context.assembly.package_overlays
    )


def check_absences(context: ChainContext) -> str:
    wanted = {str(canonicalize_name(name)) for name in context.profile.absent.distributions}
    found = []
    for group, tree in context.assembly.python_trees.items():
        site_dir = tree / context.site
        if not site_dir.is_dir():
            continue
        for entry in sorted(site_dir.iterdir()):
            stem = entry.name
            if stem.endswith(".dist-info"):
                stem = stem[: -len(".dist-info")].rsplit("-", 1)[0]
            if str(canonicalize_name(stem)) in wanted:
                found.append(f"{group}: {context.assembly.site_packages}/{entry.name}")
    require_no_problems(found, "required absences present", "absences")
    return f"absent: {', '.join(sorted(wanted)) or 'nothing required'}"


def check_elf_machine(context: ChainContext) -> str:
    # A cached tree's ELF machines are read once per cache entry and kept beside it
    # (the entry was validated path by path this build); other trees are read now.
    def machines(tree: Path) -> list[list[Any]] | None:
        entry = context.assembly.cached_trees.get(tree)
        return None if entry is None else entry.fact("elf-machines", elf_machines)

    count = check_machine(context.assembly.base_tree, context.profile.platform, machines(context.assembly.base_tree))
    for tree in context.assembly.python_trees.values():
        count += check_machine(tree, context.profile.platform, machines(tree))
    count += check_machine(context.assembly.overlay_tree, context.profile.platform)
    return f"{count} ELF files, all for {context.profile.platform}"


def check_labels(context: ChainContext) -> str:
    current = dict(context.prepared.labels)
    missing = generated.missing_labels(current)
    require_no_problems([f"{key}: missing or empty" for key in missing], "labels incomplete", "labels")
    recorded = context.prepared.in_image_receipt["predicate"]["buildDefinition"]["internalParameters"]["labels"]
    problems = [
        f"{key}: label {current.get(key)!r}, receipt {recorded.get(key)!r}"
        for key in sorted(set(current) | set(recorded))
        if current.get(key) != recorded.get(key)
    ]
    deps = {dep.name: dep for dep in context.prepared.resolved}
    for key, role in generated.ROLE_LABELS.items():
        pin = context.composition.roles[role]
        if deps[pin.name].digest.get("sha256") != current.get(key):
            problems.append(f"{key}: {current.get(key)} != resolved dependency {pin.name} sha256")
    checks = {
        generated.RETAINED_NATIVE_LABEL: receipt.sha256_hex(context.assembly.retained_native_bytes),
        generated.OVERLAY_LABEL: receipt.sha256_hex(context.assembly.overlay_bytes),
        generated.PATCH_SET_LABEL: context.composition.patch_set.patch_set_sha256,
        generated.STATUS_LABEL: context.profile.status,
        generated.PROFILE_LABEL: context.profile.name,
        generated.NCCL_LIBRARY_LABEL: context.assembly.nccl_library_sha256,
        f"{generated.OCI}.base.digest": context.prepared.base_digest,
    }
    for key, expected in checks.items():
        if current.get(key) != expected:
            problems.append(f"{key}: label {current.get(key)!r}, expected {expected!r}")
    require_no_problems(problems, "labels differ from the receipt", "labels")
    return f"{len(current)} labels complete and equal to the receipt"


def check_claims(context: ChainContext) -> str:
    recorded = context.prepared.in_image_receipt["predicate"]["buildDefinition"]["internalParameters"]["upstreamClaims"]
    expected = claim_records(context.profile, context.composition.git_pins())
    problems = []
    if recorded != expected:
        problems.append("receipt's upstreamClaims differ from the profile's claims")
    problems += [f"{c['name']}: status {c.get('status')!r} not in {CLAIM_STATUSES}" for c in recorded if c.get("status") not in CLAIM_STATUSES]
    require_no_problems(problems, "upstream claims", "claims")
    summary = ", ".join(f"{c['name']}={c['status']}" for c in recorded)
    return f"{len(recorded)} upstream identities recorded as claims: {summary}"


def verification_links(context: ChainContext) -> list[Link]:
    return [
        Link("retained-native", "retained native manifest equals what the wheel shipped", partial(check_retained_native, context)),
        Link("overlay", "the overlay changed exactly what its manifest says", partial(check_overlay, context)),
        Link("patches", "patch pre- and post-images", partial(check_patches, context)),
        Link("native-interface", "the retained extensions register every op the overlaid Python adds", partial(check_native_interface, context)),
        *([Link("source-packages", "packages from git sources changed exactly what their manifests say", partial(check_source_packages, context))]
          if context.assembly.package_overlays else []),
        Link("absences", "required absences", partial(check_absences, context)),
        Link("elf-machine", "ELF architecture of every file", partial(check_elf_machine, context)),
        Link("labels", "labels complete and equal to the receipt", partial(check_labels, context)),
        Link("claims", "the seeds' upstream identities recorded as claims", partial(check_claims, context)),
    ]


def verify_composition(
    composition: Composition, fetched: FetchedInputs, assembly: Assembly, prepared: PreparedTop
) -> list[LinkResult]:
    context = ChainContext(composition, fetched, assembly, prepared)
    return [fetched.link, *run_chain(verification_links(context))]
