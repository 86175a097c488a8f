public enum CachePolicy: Sendable {
    case cacheThenServer, cacheOnly, serverOnly, cacheElseServer
}

/// `live`: a live fetch's answer, first the server's, then each time it
/// changes; its `final` comes only when it is cancelled.
public enum FetchPhase: Sendable { case cached, live, final }

public struct FetchRequest: Sendable {
    public var entity: String
    /// Attribute names, comma-separated, "-" for descending.
    public var sort: String?
    /// At most this many objects; 0: no limit.
    public var limit: Int64 = 0
    public var policy: CachePolicy = .cacheThenServer
    /// Which records: a predicate (see `Predicate`); nil: all.
    public var predicate: String?
    /// The values of the predicate's `$1`, `$2`…
    public var arguments: [Value] = []
    /// Skips this many results (in sort order) before the first one given.
    public var offset: Int64 = 0
    /// A query in the server's own language (for Kinto, query parameters
    /// such as `has_Owner=true&_since=...`), used as given for the server
    /// phase instead of the predicate's filters; its answer is the result as
    /// the server gives it. The predicate still selects from the cache.
    /// Refused for a live fetch, which follows the cache.
    public var serverQuery: String?
    /// Objects, ids, values or a count.
    public var resultType = ResultType.objects
    /// For `.values`: attribute names; empty: every attribute.
    public var properties: [String] = []
    /// 0: the answer holds its objects. n > 0: it holds ids and makes
    /// objects n at a time as they are read, so a large answer stays small.
    public var batchSize = 0
    /// Kept live: after its answer, it answers again (phase `.live`, with
    /// the changes) whenever matching records are inserted, changed or
    /// deleted in the context, until cancelled.
    public var live = false
    /// The to-many relationship `relationship` of `owner`: the records
    /// referring to it (with `predicate`, those of them that match). The
    /// entity is the relationship's (`entity` may be empty).
    public var related: (owner: ManagedObject, relationship: String)?
    /// The library's own sync of a watched entity (a pushed notice, a
    /// periodic round, the host's `changed`): its answer is the store, read
    /// by the live fetches, so none is made; it ends with the full checks
    /// only when they are due (`Context.takeFullCheck`).
    var isBackgroundSync = false

    public init(entity: String) { self.entity = entity }
}

/// One callback of a fetch. On a final error, `results` are the cache's.
public struct FetchResult: Sendable {
    public let phase: FetchPhase
    public let error: TetherError?
    public let results: FetchedResults

    /// Every object of the results.
    public var objects: [ManagedObject] { results.objects }
}
