"""The arguments `sign` and `verify` share (`publish` those of the registry connection), and
the registry client they make. Its own module so that `verify` does not import `sign`'s
receipt reading and signing (bench/bench_sign.py)."""

from __future__ import annotations

import argparse

from ..oci.registry_auth import load_credentials
from ..oci.remote import RegistryClient


def add_signed_image_arguments(parser: argparse.ArgumentParser, *, key_help: str) -> None:
    """The image whose signature is made or checked, by its reference, and the key."""
    parser.add_argument("reference", metavar="REGISTRY/REPO:TAG")
    parser.add_argument("--key", required=True, help=key_help)


def add_registry_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--insecure", action="store_true", help="plain HTTP (loopback registries only)")
    parser.add_argument("--ca-file", help="CA certificate for a registry with a private CA")
    parser.add_argument("--auth-file", help='JSON {"username": ..., "password": ...} for Basic/token auth')


def registry_client(args: argparse.Namespace, registry: str) -> RegistryClient:
    credentials = load_credentials(args.auth_file) if args.auth_file else None
    return RegistryClient(registry, insecure=args.insecure, ca_file=args.ca_file, credentials=credentials)
