"""A workflow's request from the parsed arguments: one mechanism for every command that hands
its arguments to a workflow, so that a command names only what is not a plain copy."""

from __future__ import annotations

import argparse
import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # typeshed's name for any dataclass, known to the type checker alone
    from _typeshed import DataclassInstance

RequestT = TypeVar("RequestT", bound="DataclassInstance")


def request_from(args: argparse.Namespace, request_type: type[RequestT], **given: Any) -> RequestT:
    """``request_type`` (a workflow's request, a dataclass) with each field ``given`` names,
    else the argument of that name (its ``dest``); a field no argument fills keeps its
    default. A repeated option's list becomes a tuple: requests are frozen."""
    parsed = vars(args)
    for spec in dataclasses.fields(request_type):
        if spec.name not in given and spec.name in parsed:
            value = parsed[spec.name]
            given[spec.name] = tuple(value) if isinstance(value, list) else value
    return request_type(**given)
