/// A fetch request validated against the model: its entity, sort keys,
/// predicate (a relationship's included), what of it the server can filter,
/// and the attributes of a values fetch. Refused here, before anything runs.
struct FetchPlan {
    let entity: Entity
    let sort: [(index: Int, descending: Bool)]
    let predicate: Predicate?
    /// The predicate as the server can filter; `isExact`: all of it.
    let server: (filters: [Filter], isExact: Bool)
    /// The attributes of a values fetch.
    let properties: [Int]
    /// The server query's own limit, where its language has one (Kinto's
    /// `_limit`): its answer is the server's first that many records.
    let serverLimit: Int64?

    init(_ request: FetchRequest, in context: Context) throws {
        // A to-many relationship is a fetch of the records referring to its owner.
        let related = try request.related.map { try context.inverse(of: $0.owner, named: $0.relationship) }
        let entity = try related?.source ?? context.model.existingEntity(named: request.entity)
        if let related, !request.entity.isEmpty, request.entity != related.source.name {
            throw TetherError(.invalid, "\(request.related!.relationship) holds \(related.source.name), not \(request.entity)")
        }
        guard request.limit >= 0 else { throw TetherError(.invalid, "limit cannot be negative") }
        guard request.offset >= 0, request.offset <= Int64(Int32.max) else {
            throw TetherError(.invalid, "offset must be between 0 and \(Int32.max)")
        }
        if let query = request.serverQuery {
            // Goes into a URL as given: printable ASCII, no fragment, no space.
            guard !query.isEmpty, query.utf8.count <= 8_000,
                  query.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "#") }) else {
                throw TetherError(.invalid, "the server query must be printable ASCII without spaces or #, "
                                            + "percent-encoded, at most 8000 bytes")
            }
            // A live fetch follows the cache, which cannot answer the
            // server's own query: its answers would change meaning.
            if request.live {
                throw TetherError(.invalid, "a live fetch cannot have a server query: it follows the cache, "
                                            + "which answers the predicate, not the server's query")
            }
        }
        var sort: [(index: Int, descending: Bool)] = []
        let sortText = request.sort ?? ""
        for part in sortText.split(separator: ",", omittingEmptySubsequences: false) where !sortText.isEmpty {
            let descending = part.hasPrefix("-")
            let name = String(descending ? part.dropFirst() : part[...])
            guard let index = entity.attributeIndex(named: name) else {
                throw TetherError(.invalid, "cannot sort \(entity.name) by \(name.debugDescription): no such attribute")
            }
            sort.append((index, descending))
        }
        let asked = try request.predicate.map { try Predicate.parse($0, entity: entity, arguments: request.arguments, maximumValues: FetchTask.mostValues) }
        if let related, let owner = request.related?.owner {
            let refers = context.refers(related, to: owner)
            predicate = asked.map { .and([refers, $0]) } ?? refers
        } else {
            predicate = asked
        }
        // Refused here, not by SQLite at the first read (a store error).
        if let predicate, case let values = predicate.sql(entity).parameters.count, values > FetchTask.mostValues {
            throw TetherError(.invalid, "predicate: \(values) values, more than the \(FetchTask.mostValues) the store binds in one query")
        }
        if request.predicate == nil, !request.arguments.isEmpty {
            throw TetherError(.invalid, "arguments given without a predicate")
        }
        server = request.serverQuery != nil ? ([], true) : predicate?.serverFilters(entity, context.connection) ?? ([], true)
        serverLimit = request.serverQuery.flatMap(context.connection.limit(ofServerQuery:))
        guard request.batchSize >= 0 else { throw TetherError(.invalid, "batch size cannot be negative") }
        if request.resultType != .values, !request.properties.isEmpty {
            throw TetherError(.invalid, "properties are for a values fetch")
        }
        properties = try (request.resultType == .values && request.properties.isEmpty
            ? Array(entity.attributes.indices) : request.properties.map { name in
                guard let index = entity.attributeIndex(named: name) else {
                    throw TetherError(.invalid, "\(entity.name) has no attribute \(name.debugDescription) to fetch")
                }
                return index
            })
        self.entity = entity
        self.sort = sort
    }
}

/// How a fetch's server phase goes.
enum ServerPlan: Equatable {
    /// Only what changed since the entity's sync version; the cache, then
    /// up to date, answers.
    case sync(since: Int64)
    /// Every record: rows written before `firstWrite` and not sent again are
    /// gone; the entity's sync starts at the listing's version. After the
    /// server lost the history a sync needed, the server's versions are
    /// taken even where older than the store's. `intoEmpty`: the store held
    /// no row of the entity when it began, so no row can be older than the
    /// server's (see `FetchTask.checksVersions`).
    case wholeListing(firstWrite: Int64, afterLostHistory: Bool, intoEmpty: Bool = false)
    /// The records the request asks for, as the server gives them.
    case query

    /// The pages' objects are the answer; else the cache answers.
    var pagesAnswer: Bool {
        switch self {
        case .sync: return false
        case .wholeListing(_, let afterLostHistory, _): return !afterLostHistory
        case .query: return true
        }
    }

    /// Every page is read, whatever the request's limit.
    var readsToTheEnd: Bool {
        if case .query = self { return false }
        return true
    }
}

/// What the request asks of the server, derived from its plan.
extension FetchTask {
    /// Most values a predicate may hold: what one SQLite statement binds,
    /// less those a query adds (limit, offset).
    static let mostValues = Database.variableLimit - 16

    /// Results to collect from the server before the offset is skipped; 0: all.
    /// No more than a server query's own limit: its answer has no more.
    var needed: Int64 {
        var wanted: Int64 = 0
        if request.limit > 0 {
            let (sum, overflow) = request.limit.addingReportingOverflow(request.offset)
            wanted = overflow ? .max : sum
        }
        guard let serverLimit else { return wanted }
        return wanted == 0 ? serverLimit : min(wanted, serverLimit)
    }

    /// A plain listing of the whole entity: no predicate, limit, offset or query.
    var isWholeListing: Bool {
        request.limit == 0 && request.offset == 0 && predicate == nil && request.serverQuery == nil
    }

    /// Whether a `.query` listing stops at the limit: only where the
    /// server's order is the cache's, so its first records are the cache's
    /// first (or where the host's own query says which records). A server
    /// orders nulls, missing fields and values of other types its own way,
    /// so with sort keys every page is read and the cut made here.
    var stopsAtLimit: Bool { needed > 0 && (sort.isEmpty || request.serverQuery != nil) }

    /// The order asked of the server: by id alone, whatever the sort keys
    /// (the answer is sorted here). It is the cache's order without keys on
    /// every server, so a limit's cut is the cache's; it cannot fail (a sort
    /// value Kinto cannot put in its page token is never an id's); and a
    /// listing cut short leaves the first ids.
    var serverSort: [SortKey] {
        if request.serverQuery != nil {
            return sort.map { SortKey(field: entity.attributes[$0.index].name, descending: $0.descending) }
        }
        return [SortKey(field: entity.spec.idField, descending: false)]
    }

    /// Whether the pages' objects are kept as they come, to be the answer. A
    /// whole listing's is read from the store at its end instead: a large
    /// one holds no objects meanwhile.
    func keepsPageObjects(_ plan: ServerPlan) -> Bool {
        guard plan.pagesAnswer else { return false }
        // A whole listing's answer is the store's (see `storedAnswer`): its
        // pages make no objects, but for those in memory.
        if case .wholeListing = plan { return false }
        return true
    }

    /// Whether the listing ends with the ids-and-versions check (`VersionCheck`):
    /// a sync or whole listing, on a connection whose change listings can miss
    /// a rewritten history. Not a whole listing into an empty table: every row
    /// is then one of its pages, as the server had it when listed (changes
    /// while it was read are caught up), and a rewrite after its page would
    /// be missed by the check's own listing alike; the next sync's check sees it.
    func checksVersions(_ plan: ServerPlan) -> Bool {
        guard plan != .query, connection.changeListingsCanMissRewrites else { return false }
        if case .wholeListing(_, _, intoEmpty: true) = plan { return false }
        return true
    }
}
