/// How a live fetch's answer moved since the one before, as
/// NSFetchedResultsController tells it: indexes of deleted rows in the old
/// answer, of inserted rows in the new one, rows that moved (old → new), and
/// rows whose values changed in place (old → new, same position among the
/// rows that stayed).
public struct ResultChanges: Sendable, Equatable {
    public var deleted: [Int] = []
    public var inserted: [Int] = []
    public var moved: [Move] = []
    public var updated: [Move] = []

    public struct Move: Sendable, Equatable {
        public let from: Int
        public let to: Int
    }

    public init() {}

    public var isEmpty: Bool { deleted.isEmpty && inserted.isEmpty && moved.isEmpty && updated.isEmpty }

    /// The changes from `old` to `new` (rows in order, each id once): a row
    /// that stayed is updated if its version changed.
    static func between(_ old: [Row], _ new: [Row]) -> ResultChanges {
        var oldVersions: [ExactString: Int64?] = [:]
        for row in old { oldVersions[row.id] = row.version }
        let changed = Set(new.filter { row in oldVersions[row.id].map { $0 != row.version } ?? false }.map(\.id))
        return between(old.map(\.id), new.map(\.id), changed: changed)
    }

    struct Row: Equatable {
        let id: ExactString
        let version: Int64?
    }

    /// The changes from `old` to `new` (ids in order, each once), with
    /// `changed` the ids whose values changed.
    static func between(_ old: [ExactString], _ new: [ExactString], changed: Set<ExactString>) -> ResultChanges {
        var changes = ResultChanges()
        var oldIndex: [ExactString: Int] = [:]
        oldIndex.reserveCapacity(old.count)
        for (index, id) in old.enumerated() { oldIndex[id] = index }
        let newSet = Set(new)
        changes.deleted = old.indices.filter { !newSet.contains(old[$0]) }
        // Rows in both, in new order, with their old positions: those off the
        // longest increasing run of old positions are the ones that moved.
        var kept: [(from: Int, to: Int)] = []
        for (index, id) in new.enumerated() {
            if let from = oldIndex[id] { kept.append((from, index)) } else { changes.inserted.append(index) }
        }
        let staying = longestIncreasingRun(kept.map(\.from))
        for (position, row) in kept.enumerated() {
            if !staying.contains(position) {
                changes.moved.append(Move(from: row.from, to: row.to))
            } else if changed.contains(new[row.to]) {
                changes.updated.append(Move(from: row.from, to: row.to))
            }
        }
        return changes
    }

    /// Positions in `values` of one longest strictly increasing subsequence.
    private static func longestIncreasingRun(_ values: [Int]) -> Set<Int> {
        var tails: [Int] = []  // positions: the smallest tail of each run length
        var previous = Array(repeating: -1, count: values.count)
        for (position, value) in values.enumerated() {
            var low = 0, high = tails.count
            while low < high {
                let middle = (low + high) / 2
                if values[tails[middle]] < value { low = middle + 1 } else { high = middle }
            }
            if low > 0 { previous[position] = tails[low - 1] }
            if low == tails.count { tails.append(position) } else { tails[low] = position }
        }
        var run = Set<Int>()
        var position = tails.last ?? -1
        while position >= 0 {
            run.insert(position)
            position = previous[position]
        }
        return run
    }
}
