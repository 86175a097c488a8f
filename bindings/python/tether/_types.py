"""The type aliases of the public surface (the package is typed: py.typed).

    tether.Value       what a value reads as and is set to: None, bool, int,
                       float, str, or a list/dict for a JSON attribute
    tether.Key         an attribute's name (str) or code (int)
    tether.Policy      a fetch's cache policy ("cache_then_server", ...)
    tether.ResultType  what a fetch answers ("objects", "ids", "count", "values")
    tether.MergePolicy what a save does with a conflict ("report", ...)
    tether.Delivery    where callbacks run ("thread" or "poll")
    tether.Phase       a fetch callback's phase ("cached", "final", "live")
    tether.Pending     an object's unsaved change ("insert", "update", "delete")

Written with typing's Union and Literal (not ``X | Y``), which Python 3.9
evaluates at run time; nothing here is more than an alias.
"""

from typing import Any, Dict, List, Literal, Union

Value = Union[None, bool, int, float, str, List[Any], Dict[str, Any]]
Key = Union[str, int]
Policy = Literal["cache_then_server", "cache_only", "server_only", "cache_else_server"]
ResultType = Literal["objects", "ids", "count", "values"]
MergePolicy = Literal["report", "server_wins", "client_wins", "properties", "merge_properties"]
Delivery = Literal["thread", "poll"]
Phase = Literal["cached", "final", "live"]
Pending = Literal["insert", "update", "delete"]

__all__ = ["Value", "Key", "Policy", "ResultType", "MergePolicy", "Delivery", "Phase", "Pending"]
