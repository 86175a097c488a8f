/// Many ids in little memory: their UTF-8 bytes end to end and where each
/// ends, about the ids' own size plus 4 bytes each (a `[String]` of short
/// ids costs 16 or more, plus a heap object for any over 15 bytes). For the
/// answers of batched fetches, which may hold millions.
struct IDList: Sendable {
    private var bytes: [UInt8] = []
    private var ends: [UInt32] = []

    init() {}

    init(_ ids: [String]) {
        for id in ids { try? append(Array(id.utf8)) }
    }

    var count: Int { ends.count }

    mutating func append<Bytes: Collection>(_ id: Bytes) throws where Bytes.Element == UInt8 {
        guard bytes.count + id.count <= Int(UInt32.max) else {
            throw TetherError(.store, "an answer's ids take more than 4 GB")
        }
        bytes.append(contentsOf: id)
        ends.append(UInt32(bytes.count))
    }

    subscript(index: Int) -> String {
        let start = index == 0 ? 0 : Int(ends[index - 1])
        return String(decoding: bytes[start..<Int(ends[index])], as: UTF8.self)
    }

    /// Ids from `range`, in order.
    func slice(_ range: Range<Int>) -> [String] { range.map { self[$0] } }

    /// Gives back the room kept for growth (up to half of it).
    mutating func compact() {
        var exactBytes: [UInt8] = []
        exactBytes.reserveCapacity(bytes.count)
        exactBytes.append(contentsOf: bytes)
        bytes = exactBytes
        var exactEnds: [UInt32] = []
        exactEnds.reserveCapacity(ends.count)
        exactEnds.append(contentsOf: ends)
        ends = exactEnds
    }
}

/// Rows of the store by rowid, in an answer's order: 4 bytes a row while
/// every rowid fits in 32 bits, else 8. A batched answer keeps these rather
/// than text ids (about 81 bytes a row with UUID-shaped ids).
struct RowIDList: Sendable {
    private var narrow: [UInt32] = []
    private var wide: [Int64]?

    init() {}

    var count: Int { wide?.count ?? narrow.count }

    mutating func append(_ rowid: Int64) {
        if wide == nil, rowid >= 0, rowid <= Int64(UInt32.max) {
            narrow.append(UInt32(rowid))
            return
        }
        if wide == nil {
            wide = narrow.map(Int64.init)
            narrow = []
        }
        wide!.append(rowid)
    }

    subscript(index: Int) -> Int64 { wide?[index] ?? Int64(narrow[index]) }

    /// Rowids from `range`, in order.
    func slice(_ range: Range<Int>) -> [Int64] { range.map { self[$0] } }

    /// Gives back the room kept for growth.
    mutating func compact() {
        if let list = wide {
            wide = list.withUnsafeBufferPointer { Array($0) }
        } else {
            narrow = narrow.withUnsafeBufferPointer { Array($0) }
        }
    }
}
