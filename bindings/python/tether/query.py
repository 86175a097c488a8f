"""Query, a fetch as a value, and QueryResult, what ``ctx.query(...)`` answers.

A Query is immutable: built by keywords (``Query("changes", where="Status
== $1", args=["open"], sort=["-Priority"])``) or fluently (``Query("changes")
.where("Status == $1", "open").sort("-Priority").limit(10)``), each step a
new Query. Everything Python can judge is judged when it is built
(TypeError, ValueError, OverflowError); what only the model knows (an
unknown entity or attribute, a bad predicate) raises InvalidError or
NotFoundError when it runs, before anything is sent.

The fluent methods take the keywords' names, so a Query reads its values
back through ``as_dict()`` (or its repr, which is the keyword form).

This module imports nothing of the context at run time (the context
imports it): a QueryResult runs on the context's one fetch primitive
(ContextFetching._fetch) and waits for its final answer, which it marks
``offline`` when the server could not be reached.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterator, List, NoReturn, Optional, Sequence,
                    Tuple, TypeVar, Union, cast)

from ._types import Policy, Value

from .errors import NetworkError
from .values import Argument
from .answers import Answer
from .results import Count, Results, Row, _marked

if TYPE_CHECKING:
    from .fetching import ContextFetching as Context, Related
    from .objects import Object
    from .results import LiveAnswer
    from .tasks import Task

POLICY_NAMES: Tuple[Policy, ...] = ("cache_then_server", "cache_only", "server_only", "cache_else_server")
_INT64 = (-(1 << 63), (1 << 63) - 1)
_OFFSET_MAX = (1 << 31) - 1      # the library's bound, said here before anything runs


class _Keep:
    """The default of Context.query's keywords: keep the Query's value."""

    def __repr__(self) -> str:
        return "KEEP"


KEEP: Any = _Keep()


def _int(name: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError("%s must be an int, not %s" % (name, type(value).__name__))
    if not low <= value <= high:
        raise ValueError("%s must be between %d and %d, not %d" % (name, low, high, value))
    return value


def _names(what: str, value: object, allow_sign: bool) -> Tuple[str, ...]:
    """A str ("A,-B") or a sequence of str -> a tuple of names, each checked."""
    if isinstance(value, str):
        items: List[object] = [part.strip() for part in value.split(",")]
    elif isinstance(value, (bytes, bytearray, memoryview, dict, set, frozenset)):
        raise TypeError("%s must be a str or a list of str, not %s" % (what, type(value).__name__))
    else:
        try:
            items = list(value)   # type: ignore[call-overload]  # checked: TypeError below
        except TypeError:
            raise TypeError("%s must be a str or a list of str, not %s"
                            % (what, type(value).__name__)) from None
    names: List[str] = []
    for item in items:
        if not isinstance(item, str):
            raise TypeError("%s must be attribute names (str), not %s" % (what, type(item).__name__))
        bare = item[1:] if allow_sign and item[:1] in ("-", "+") else item
        if not bare or "," in bare or bare != bare.strip():
            raise ValueError("%s: %r is not an attribute name" % (what, item))
        names.append(item)
    return tuple(names)


def _check_args(values: Sequence[object]) -> Tuple[Argument, ...]:
    if isinstance(values, (str, bytes, bytearray, memoryview, dict, set, frozenset)):
        raise TypeError("args must be a sequence of values for $1, $2..., not %s" % type(values).__name__)
    try:
        out = tuple(values)
    except TypeError:
        raise TypeError("args must be a sequence of values for $1, $2..., not %s"
                        % type(values).__name__) from None
    for n, v in enumerate(out, 1):
        if isinstance(v, int) and not isinstance(v, bool) and not _INT64[0] <= v <= _INT64[1]:
            raise OverflowError("predicate argument $%d: %d does not fit in 64 bits" % (n, v))
        if v is not None and not isinstance(v, (bool, int, float, str)):
            raise TypeError("predicate argument $%d must be str, int, float, bool or None, not %s"
                            % (n, type(v).__name__))
    return out   # type: ignore[return-value]  # each checked above


class Query:
    """A fetch as an immutable value: what to ask, not yet asked.

    entity      the entity's name
    where       a predicate (tether.h, "Predicates"), None: every record
    args        the values of its $1, $2...: str, int, float, bool or None
    sort        attribute names, "-" for descending ("A,-B" or a list)
    limit       at most this many (None: no limit; at least 1)
    offset      skip this many first, in sort order (0 to 2**31-1)
    batch       objects made this many at a time while iterating (0: all at once)
    properties  what values() reads when called without names (None: every attribute)
    policy      "cache_then_server" (default), "cache_only", "server_only", "cache_else_server"
    server_query  the server's own query for the server phase: Kinto's query
                parameters, e.g. "in_Status=1,2&_since=42", used as given
                instead of the predicate's filters (percent-encoded printable
                ASCII, no space or '#', at most 8000 bytes). The final answer
                is then the server's, in `sort` with `offset` and `limit`
                (Kinto's "_limit=N" is a limit: the server's first N);
                `where` still selects from the cache for the cached phase
                and "cache_only"

    Equal Queries ask the same; a Query is hashable."""

    __slots__ = ("entity", "_where", "_args", "_sort", "_limit", "_offset", "_batch",
                 "_properties", "_policy", "_server_query")
    _FIELDS = ("where", "args", "sort", "limit", "offset", "batch", "properties", "policy", "server_query")

    entity: str
    _where: Optional[str]
    _args: Tuple[Argument, ...]
    _sort: Tuple[str, ...]
    _limit: Optional[int]
    _offset: int
    _batch: int
    _properties: Optional[Tuple[str, ...]]
    _policy: Policy
    _server_query: Optional[str]

    def __init__(self, entity: str, *, where: Optional[str] = None, args: Sequence[Argument] = (),
                 sort: Union[str, Sequence[str]] = (), limit: Optional[int] = None, offset: int = 0,
                 batch: int = 0, properties: Optional[Sequence[str]] = None,
                 policy: Policy = "cache_then_server", server_query: Optional[str] = None) -> None:
        if not isinstance(entity, str):
            raise TypeError("entity must be a str, not %s" % type(entity).__name__)
        if not entity:
            raise ValueError("entity must not be empty")
        if where is not None and not isinstance(where, str):
            raise TypeError("where must be a str or None, not %s" % type(where).__name__)
        checked_args = _check_args(args)
        if checked_args and where is None:
            raise ValueError("args without a predicate: give where= with $1...")
        if limit is not None:
            limit = _int("limit", limit, 1, _INT64[1])   # 0 would mean "no limit" to the library
        offset = _int("offset", offset, 0, _OFFSET_MAX)
        batch = _int("batch", batch, 0, _INT64[1])
        props = None if properties is None else _names("properties", properties, allow_sign=False)
        if props == ():
            raise ValueError("properties must name at least one attribute (None: every attribute)")
        if not isinstance(policy, str):
            raise TypeError("policy must be a str, not %s" % type(policy).__name__)
        if policy not in POLICY_NAMES:
            raise ValueError("policy must be one of %s, not %r" % (", ".join(POLICY_NAMES), policy))
        if server_query is not None and not isinstance(server_query, str):
            raise TypeError("server_query must be a str or None, not %s" % type(server_query).__name__)
        init = object.__setattr__
        init(self, "entity", entity)
        init(self, "_where", where)
        init(self, "_args", checked_args)
        init(self, "_sort", _names("sort", sort, allow_sign=True) if sort != () else ())
        init(self, "_limit", limit)
        init(self, "_offset", offset)
        init(self, "_batch", batch)
        init(self, "_properties", props)
        init(self, "_policy", policy)
        init(self, "_server_query", server_query)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a Query is immutable: each step (q.limit(10)...) returns a new one")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a Query is immutable")

    # -- reading

    def as_dict(self) -> Dict[str, Any]:
        """The keywords that build this Query again (those not at their default):
        ``Query(q.entity, **q.as_dict()) == q``."""
        defaults = _DEFAULTS
        out: Dict[str, Any] = {}
        for name in self._FIELDS:
            value = getattr(self, "_" + name)
            if value != defaults[name]:
                out[name] = list(value) if isinstance(value, tuple) else value
        return out

    def _key(self) -> Tuple[Any, ...]:
        # Types kept apart: True == 1 in Python, not in a predicate.
        return (self.entity, tuple((type(a), a) for a in self._args)) + tuple(
            getattr(self, "_" + name) for name in self._FIELDS if name != "args")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Query) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __reduce__(self) -> Tuple[Any, Tuple[Any, ...]]:
        # pickle and copy build it again (its attributes cannot be set).
        return (_rebuild, (self.entity, self.as_dict()))

    def __repr__(self) -> str:
        parts = [repr(self.entity)] + ["%s=%r" % kv for kv in self.as_dict().items()]
        return "Query(%s)" % ", ".join(parts)

    def replace(self, **changes: Any) -> Query:
        """A new Query with these keywords changed (as the constructor takes
        them; an unknown one is a TypeError)."""
        for name in changes:
            if name not in self._FIELDS:
                raise TypeError("Query has no option %r (options: %s)" % (name, ", ".join(self._FIELDS)))
        values = {name: getattr(self, "_" + name) for name in self._FIELDS}
        values.update(changes)
        return Query(self.entity, **values)

    # -- building, one step at a time

    def where(self, predicate: Optional[str], *args: Argument) -> Query:
        """Filtered by `predicate`, its $1, $2... taking `args`; None: every record."""
        return self.replace(where=predicate, args=args)

    def sort(self, *keys: str) -> Query:
        """Sorted by these attributes ("-Name" descending), each a name or "A,-B"."""
        names: List[str] = []
        for key in keys:
            names.extend(_names("sort", key, allow_sign=True))
        return self.replace(sort=names)

    def limit(self, n: Optional[int]) -> Query:
        """At most `n` (None: no limit)."""
        return self.replace(limit=n)

    def offset(self, n: int) -> Query:
        """Skipping the first `n`, in sort order."""
        return self.replace(offset=n)

    def batch(self, n: int) -> Query:
        """Iteration makes objects `n` at a time (0: all at once)."""
        return self.replace(batch=n)

    def properties(self, *names: str) -> Query:
        """What values() reads when called without names (none given: every attribute)."""
        return self.replace(properties=names or None)

    def policy(self, policy: Policy) -> Query:
        """Where the answer comes from (see the class docstring)."""
        return self.replace(policy=policy)

    def server_query(self, query: Optional[str]) -> Query:
        """The server's own query for the server phase (see the class docstring)."""
        return self.replace(server_query=query)

    # -- for the runners

    def _fetch_options(self) -> Dict[str, Any]:
        """The keywords of the context's _fetch this asks."""
        return dict(where=self._where, args=self._args, sort=",".join(self._sort) or None,
                    limit=self._limit or 0, offset=self._offset, policy=self._policy,
                    server_query=self._server_query)


_DEFAULTS: Dict[str, Any] = dict(where=None, args=(), sort=(), limit=None, offset=0, batch=0,
                                 properties=None, policy="cache_then_server", server_query=None)


def _rebuild(entity: str, options: Dict[str, Any]) -> Query:
    return Query(entity, **options)


def make_query(query: Union[str, Query], options: Dict[str, Any]) -> Query:
    """Context.query's first argument and keywords as one Query: an entity's
    name and keywords build one, a Query's keywords replace its values (those
    given as KEEP are left out)."""
    given = {k: v for k, v in options.items() if v is not KEEP}
    if isinstance(query, Query):
        return query.replace(**given) if given else query
    if isinstance(query, str):
        return Query(query, **given)
    raise TypeError("query must be a Query or an entity's name, not %s" % type(query).__name__)


OnCached = Callable[[Any], object]

# What each result type of the C fetch is, as a QueryResult method.
_RESULT_METHODS = {"objects": "all()", "ids": "ids()", "count": "count()", "values": "values(...)"}
QUERY_KEYWORDS = Query._FIELDS + ("on_cached", "progress", "timeout")

_F = TypeVar("_F", bound=Callable[..., Any])


def says_unknown_keywords(method: _F) -> _F:
    """Context.query and AsyncContext.query, a keyword they do not take
    refused with what to do instead (a type checker sees `method` as is)."""
    known = frozenset(inspect.signature(method).parameters)

    @functools.wraps(method)
    def checked(*args: Any, **options: Any) -> Any:
        if not known.issuperset(options):
            _refuse_keyword({k: v for k, v in options.items() if k not in known})
        return method(*args, **options)
    return cast(_F, checked)


def _refuse_keyword(unknown: Dict[str, Any]) -> NoReturn:
    name = sorted(unknown)[0]
    if name == "result":
        value = unknown[name]
        method = _RESULT_METHODS.get(value) if isinstance(value, str) else None
        raise TypeError("query() takes no result=: call the result's method for it (%s), e.g. "
                        "ctx.query(...).%s" % (", ".join(_RESULT_METHODS.values()), method or "count()"))
    if name in ("live", "callback"):
        raise TypeError("query() takes no %s=: use ctx.query(...).live(callback) or .start(callback)" % name)
    near = difflib.get_close_matches(name, QUERY_KEYWORDS, n=1)
    raise TypeError("query() got an unexpected keyword argument %r%s (it takes: %s)" % (
        name, " (did you mean %s?)" % near[0] if near else "", ", ".join(QUERY_KEYWORDS)))


def _no_method(result: object, name: str, methods: Sequence[str]) -> AttributeError:
    """AttributeError for a method a QueryResult does not have, naming the nearest."""
    near = difflib.get_close_matches(name, methods, n=1)
    return AttributeError("%s has no attribute %r%s (it has: %s)" % (
        type(result).__name__, name, " (did you mean %s?)" % near[0] if near else "", ", ".join(methods)))


def _close(answer: object) -> None:
    if isinstance(answer, Results):
        answer.close()   # a batched answer's (an Answer's handle goes with it)


def _final(ctx: Context, task: Task, policy: str) -> Any:
    """A finished fetch's final answer as query's methods give it: marked
    ``offline`` False; when the server could not be reached (and the context
    is offline since), the cache's answer marked ``offline`` True, unless
    the policy asked for the server's alone; else the final error, raised."""
    _close(task.cached)   # a batched cached answer: on_cached had it
    error = task.error
    if error is None:
        # task.objects: the final answer (task.result too, but that name is
        # the one a concurrent.futures.Future gives a method).
        return _marked(task.objects, False)
    if isinstance(error, NetworkError) and policy != "server_only" and not ctx.online:
        return _marked(task.objects, True)
    raise error


class QueryResult:
    """What Context.query gives: nothing runs until one of its methods (or
    iteration) asks, and each asks the server again (as the policy says).

    ``for obj in r`` / ``r.all()``  the Objects (a lazy list; with a batch,
                                    iteration makes them that many at a time)
    ``r.first()``                   the first Object, or None
    ``r.count()``                   how many match (the server counts where it can)
    ``r.ids()``                     their ids (str), no values read
    ``r.values("A", "B")``          a dict per record with those attributes
    ``r.live(callback)``            a live fetch: callback(LiveAnswer) per answer
    ``r.start(callback)``           all()'s fetch, started: a Task (a Future)

    Each answers the policy's final answer: under "cache_then_server" the
    server's, merged into the cache. The cache's first answer comes to
    Context.query's ``on_cached=`` callback (where callbacks run; with a
    batch, a Results closed once the final answer is in), or ask for it
    alone with ``policy="cache_only"``. When the server cannot be reached
    the answer is the cache's, with ``offline`` True (a ``tether.Answer`` or
    ``tether.Count``), unless the policy is "server_only" (NetworkError).
    Errors raise (InvalidError for a bad predicate, NotFoundError for an
    unknown entity, TimeoutError past `timeout`)."""

    __slots__ = ("context", "query", "_on_cached", "_progress", "_timeout", "_related")

    def __init__(self, context: Context, query: Query, on_cached: Optional[OnCached] = None,
                 progress: Optional[Callable[[int, Optional[int]], object]] = None,
                 timeout: Optional[float] = 30.0, related: Optional[Related] = None) -> None:
        if on_cached is not None and not callable(on_cached):
            raise TypeError("on_cached must be callable or None, not %s" % type(on_cached).__name__)
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise TypeError("timeout must be a number or None, not %s" % type(timeout).__name__)
        self.context = context
        self.query = query
        self._on_cached = on_cached
        self._progress = progress
        self._timeout = timeout
        self._related = related   # (owner, name): a to-many relationship's records (Object.related_query)

    def __repr__(self) -> str:
        return "<tether.QueryResult %r>" % (self.query,)

    if not TYPE_CHECKING:   # a type checker refuses a misspelled method itself
        def __getattr__(self, name: str) -> NoReturn:
            # Only for names it lacks: a misspelled method says the nearest one.
            raise _no_method(self, name, ("all", "first", "count", "ids", "values", "live", "start", "query"))

    def _callback(self) -> Optional[Callable[[str, Optional[BaseException], Any], object]]:
        on_cached = self._on_cached
        if on_cached is None:
            return None

        def callback(phase: str, error: Optional[BaseException], answer: Any) -> None:
            if phase == "cached":
                on_cached(answer)
        return callback

    def _start(self, query: Query, **options: Any) -> Task:
        return self.context._fetch(query.entity, progress=self._progress, related=self._related,
                                   **query._fetch_options(), **options)

    def _run(self, query: Query, **options: Any) -> Any:
        task = self._start(query, callback=self._callback(), **options)
        task._wait_or_cancel(self._timeout, "fetch of %r" % (query.entity,))
        return _final(self.context, task, query._policy)

    def __iter__(self) -> Iterator[Object]:
        batch = self.query._batch
        answer = self._run(self.query, batch=batch)
        try:
            yield from answer
        finally:
            _close(answer)

    def all(self) -> Answer[Object]:
        """Every Object of the answer, in order (a tether.Answer: a lazy list with ``offline``)."""
        answer: Answer[Object] = self._run(self.query)
        return answer

    def first(self) -> Optional[Object]:
        """The first Object of the answer, or None when there is none."""
        answer = self._run(self.query.limit(1))
        return answer[0] if answer else None

    def count(self) -> Count:
        """How many records match (after offset, at most limit): a tether.Count."""
        n: Count = self._run(self.query, result="count")
        return n

    def ids(self) -> Answer[str]:
        """The ids of the records that match, in order."""
        ids: Answer[str] = self._run(self.query, result="ids")
        return ids

    def values(self, *properties: str) -> Answer[Row]:
        """A dict {name: value} per record, with `properties` (none: the
        Query's, else every attribute) in that order; no Objects made."""
        names = _names("properties", properties, allow_sign=False) if properties else self.query._properties
        rows: Answer[Row] = self._run(self.query, result="values",
                                    properties=None if names is None else list(names))
        return rows

    def start(self, callback: Optional[Callable[[str, Optional[BaseException], Any], object]] = None) -> Task:
        """Starts the fetch all() would make and returns at once: a Task, a
        concurrent.futures.Future of all()'s answer (``task.result(timeout)``,
        ``task.cancel()``, ``await task``). callback(phase, error, answer)
        runs once per phase ("cached" then "final" under the default policy)
        where the context delivers callbacks; `error` is None or the phase's
        TetherError (a cancelled task's is TaskCancelledError)."""
        if callback is not None and not callable(callback):
            raise TypeError("callback must be callable or None, not %s" % type(callback).__name__)
        return self._start(self.query, callback=callback)

    def live(self, callback: Callable[[LiveAnswer], object]) -> Task:
        """Starts a live fetch of the Objects: callback(answer) with a
        tether.LiveAnswer (`phase` "cached" or "live", `answer`, `changes`,
        `error` an exception or None) for the cached answer the policy gives,
        then the first live one, then one per change, until ``task.cancel()``
        or the context closes. Returns the Task; callbacks run where the
        context delivers them. With the Query's batch, each answer is a
        tether.Results (made `batch` objects at a time), the callback's to
        close (garbage collection does otherwise)."""
        if not callable(callback):
            raise TypeError("callback must be callable, not %s" % type(callback).__name__)

        def on_answer(answer: LiveAnswer) -> None:
            callback(answer)
        return self._start(self.query, live=True, on_answer=on_answer, batch=self.query._batch)
