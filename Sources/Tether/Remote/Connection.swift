/// The one interface between the core and a server. Model, Store, Graph and
/// Fetch speak only this; Kinto is one implementation, an in-memory table
/// another, and host-written connections will be more.
///
/// Every call is asynchronous: it returns at once with a handle, and calls
/// `done` exactly once, on any thread, with the answer or an error, or with
/// `.cancelled` after the handle is cancelled or the connection shut down.
/// `done` must be quick (the core only hands the answer to its own worker),
/// and no call may invoke `done` before it has returned its handle.
public protocol Connection: AnyObject, Sendable {
    /// Names the server and the data set, so a store saved for one is never
    /// opened against another. Holds no credentials.
    var identity: String { get }

    /// Identities an earlier version wrote for the same data set: a store
    /// saved under one opens, and holds `identity` from its next online open.
    var formerIdentities: [String] { get }

    func serverInfo(_ done: @escaping @Sendable (Result<ServerInfo, TetherError>) -> Void) -> any Cancellable

    /// Every record type the server offers (in the connection's data set).
    func specs(_ done: @escaping @Sendable (Result<[Spec], TetherError>) -> Void) -> any Cancellable

    /// One page of a listing: the first for `request.cursor == nil`, else the
    /// one the cursor names. With `request.since`, the listing holds what
    /// changed after that version, deletions as `deletedIDs`; if the history
    /// that far back is gone, it fails with `.expired`.
    func page(_ request: PageRequest, _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void)
        -> any Cancellable

    /// How many records the listing `request` would give in all (its
    /// cursor and limit aside), without sending them.
    func count(_ request: PageRequest, _ done: @escaping @Sendable (Result<Int64, TetherError>) -> Void)
        -> any Cancellable

    /// The records of `spec` with these ids, one page at a time as `page`
    /// pages. Ids the server does not have are simply absent. `ids` fits one
    /// request: split longer lists with `idBatches`.
    func records(_ spec: Spec, ids: [String], cursor: PageCursor?,
                 _ done: @escaping @Sendable (Result<Page, TetherError>) -> Void) -> any Cancellable

    /// `ids` split into lists that each fit one `records` request.
    func idBatches(_ ids: [String]) -> [[String]]

    /// Whether `page` and `count` can apply this filter on the server so
    /// that their answer holds every record `Filter` says matches (maybe
    /// more, which the core then filters out itself). The core sends only
    /// filters a connection supports, at most one per field.
    func supports(_ filter: Filter) -> Bool

    /// Whether the server's answer to this (supported) filter is exactly the
    /// records `Filter` says match, no more: only then does the core leave
    /// a count, or the cut of a limit, to the server.
    func filtersExactly(_ filter: Filter) -> Bool

    /// Whether a listing with `since` can miss a change: history rewritten
    /// behind a newer change (a record put back with an older version, as a
    /// Kinto restore does). Then every sync and whole listing ends with a
    /// listing of ids and versions compared with the store (`VersionCheck`);
    /// otherwise a sync only counts the records, which a re-created set shows.
    var changeListingsCanMissRewrites: Bool { get }

    /// How many records a server query (`PageRequest.rawQuery`) asks for
    /// at most, where its language says so (Kinto's `_limit`): the core
    /// then follows pages only until it holds that many, and answers the
    /// first that many. nil: the server's pages say where its answer ends.
    func limit(ofServerQuery query: String) -> Int64?

    /// Whether the server can tell of its changes (`ChangePushing`)...
    var canPushChanges: Bool { get }

    /// ...and does for this entity, as far as the connection knows now (a
    /// PostgreSQL table without Tether's triggers does not): such an entity
    /// needs no periodic sync.
    func pushesChanges(of entity: String) -> Bool

    /// How long the server asked to be left alone (Kinto's `Backoff`) from
    /// now, in milliseconds; 0 when it did not. Periodic syncs skip their
    /// rounds meanwhile.
    var backoffRemainingMilliseconds: Int64 { get }

    /// One list of every write to the data set since `position` (Kinto's
    /// history plugin), read by a periodic round instead of asking each
    /// watched entity; nil at once when the server offers none. With
    /// `position` nil, the answer only tells where the list ends now.
    func changeFeed(since position: String?, _ done: @escaping @Sendable (Result<ChangeFeed, TetherError>) -> Void)
        -> (any Cancellable)?

    /// Sends `writes` in order, in as few requests as the server allows,
    /// and calls `answered` with their outcomes in order, a run at a time as
    /// the server answers (so the first can be settled while the next are on
    /// the wire), until every write has one: the call that completes the
    /// count is the last. After a cancel or shutdown, writes without an
    /// outcome end `.failed(.cancelled)`: those already sent may have been
    /// applied (a later save finds out, as writes are conditional).
    func write(_ writes: [RecordWrite], _ answered: @escaping @Sendable ([WriteOutcome]) -> Void) -> any Cancellable

    /// Ends every request in flight with `.cancelled` (each `done` once) and
    /// refuses new ones the same way. Blocks until those `done`s have run.
    func shutdown()
}

extension Connection {
    public var formerIdentities: [String] { [] }
    public var canPushChanges: Bool { false }
    public func pushesChanges(of entity: String) -> Bool { false }
    public var backoffRemainingMilliseconds: Int64 { 0 }
    public func changeFeed(since position: String?,
                           _ done: @escaping @Sendable (Result<ChangeFeed, TetherError>) -> Void) -> (any Cancellable)? {
        nil
    }
}

/// What a change feed answered: where the next read begins, and the writes
/// since the position asked from, in the order the server made them.
public struct ChangeFeed: Sendable, Equatable {
    public var position: String
    /// nil: not listed (the first read, or more than a read takes): any
    /// entity may have changed in any way.
    public var writes: [FeedWrite]?

    public init(position: String, writes: [FeedWrite]?) {
        self.position = position
        self.writes = writes
    }
}

/// One write a change feed lists.
public struct FeedWrite: Sendable, Equatable {
    /// The spec written to.
    public var entity: String
    /// The record's id; nil: a write to the entity itself (its collection
    /// deleted or changed), after which anything in it may differ.
    public var id: String?
    /// The record's version after the write (a restore's is older than the
    /// entity's versions before it).
    public var version: Int64?
    public var deleted: Bool

    public init(entity: String, id: String?, version: Int64?, deleted: Bool) {
        self.entity = entity
        self.id = id
        self.version = version
        self.deleted = deleted
    }
}

/// A request in flight. Cancelling one that has already ended does nothing.
public protocol Cancellable: Sendable {
    func cancel()
}

public struct SortKey: Sendable, Equatable {
    /// A field name of the spec.
    public var field: String
    public var descending: Bool

    public init(field: String, descending: Bool) {
        self.field = field
        self.descending = descending
    }
}

/// Where a listing goes on: opaque to the core, meaningful to its connection.
public struct PageCursor: Sendable, Equatable {
    public let token: String
    public init(_ token: String) { self.token = token }
}

/// A comparison the server applies to a listing: `field` against `values`
/// (one value, or the candidates of `.oneOf`), meaning exactly what the
/// predicate comparison `field op value` means (`Filter.matches`): the
/// field's value is read as an attribute of `type`; a missing or null field,
/// or one holding a value of another type (a misfit: `5.0` or `"5"` for an
/// integer, `1` for a boolean), is null, and null matches only `.notEqual`;
/// numbers compare by value, text by Unicode scalars, exactly (no case or
/// accent folding, no normalization).
public struct Filter: Sendable, Equatable {
    public var field: String
    public var `operator`: FilterOperator
    public var values: [JSON]
    /// The type of the attribute the field holds.
    public var type: AttributeType

    public init(field: String, _ operator: FilterOperator, _ values: [JSON], type: AttributeType) {
        self.field = field
        self.operator = `operator`
        self.values = values
        self.type = type
    }
}

public enum FilterOperator: Sendable, CaseIterable {
    case equal, notEqual, lessThan, greaterThan, atMost, atLeast, oneOf
}

public struct PageRequest: Sendable {
    public var spec: Spec
    /// All must hold; each with an operator the connection supports.
    public var filters: [Filter] = []
    public var sort: [SortKey] = []
    /// At most this many records in all; 0: no limit.
    public var limit: Int64 = 0
    /// A query in the server's own language, used as given.
    public var rawQuery: String?
    /// Only what changed after this version of the collection (a `Page`'s
    /// `version`), deletions included; nil: the records as they stand.
    public var since: Int64?
    /// Only these fields are needed (the spec's id and version among them):
    /// a connection may leave the others out, and then marks its pages
    /// `partial`, or send whole records. nil: whole records.
    public var fields: [String]?
    public var cursor: PageCursor?
    /// The caller reads every page and orders what it keeps itself, so any
    /// order of the key that pages consistently will do (PostgreSQL pages by
    /// the key's index then). false: pages in `sort` order exactly, as a
    /// caller that stops once it has enough needs.
    public var readsEveryPage = false

    public init(spec: Spec) { self.spec = spec }
}

/// One page of records. The records are decoded by `decode`, which the core
/// calls off the network thread, so decoding a page overlaps fetching the next.
public struct Page: Sendable {
    public let next: PageCursor?
    /// The collection's version when the server answered, if it tells: every
    /// change up to it is in this listing (a later `since` starts there).
    public let version: Int64?
    /// How many records the whole listing holds, if the server tells.
    public let total: Int64?
    private let decoder: @Sendable () throws -> PageContent

    public init(next: PageCursor?, version: Int64? = nil, total: Int64? = nil,
                decode: @escaping @Sendable () throws -> PageContent) {
        self.next = next
        self.version = version
        self.total = total
        decoder = decode
    }

    public func decode() throws -> PageContent { try decoder() }
}

public struct PageContent: Sendable {
    public var records: [RecordFields]
    /// Records deleted on the server (in a listing with `since`).
    public var deletedIDs: [String]
    /// Where the server says it, the version each deletion took, in the
    /// order of `deletedIDs` (Kinto: the tombstone's): the deleted record's
    /// versions precede it, and a record made again has a newer one. Empty
    /// or nil: not said (the row's last version is taken).
    public var deletedVersions: [Int64?] = []
    /// Items of the page the connection could not read as a record or a
    /// deletion: left out, the rest of the page taken (the core tells).
    public var unreadable: [UnreadableItem] = []
    /// The records may lack fields the server holds (a server query chose
    /// the fields): a field absent is not a field without a value.
    public var partial = false

    public init(records: [RecordFields], deletedIDs: [String] = []) {
        self.records = records
        self.deletedIDs = deletedIDs
    }
}

/// An item of a page that is no record: where it was, and why.
public struct UnreadableItem: Sendable {
    /// Its index among the page's items (0: the first).
    public var position: Int
    public var reason: String

    public init(position: Int, reason: String) {
        self.position = position
        self.reason = reason
    }
}

extension Connection {
    /// Runs one call and waits for its answer: for opening a context, which is
    /// synchronous by contract. Must not run on a thread `done` needs.
    func wait<T: Sendable>(_ call: (@escaping @Sendable (Result<T, TetherError>) -> Void) -> any Cancellable)
        -> Result<T, TetherError> {
        let answer = ConditionLock<Result<T, TetherError>?>(nil)
        _ = call { result in answer.withLock { $0 = result } }
        return answer.withLock(when: { $0 != nil }, until: nil) { value, _ in value! }
    }
}
