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
/// than text ids (about 81 bytes a row with UUID-shaped ids). Kept in chunks
/// of a fixed size, so growing never copies the whole list: a peak of about
/// the list's own size, not twice or thrice it.
struct RowIDList: Sendable {
    private static let chunkBits = 16
    private static let chunkSize = 1 << chunkBits
    private var narrow: [[UInt32]] = []
    private var wide: [[Int64]]?
    private(set) var count = 0

    init() {}

    mutating func append(_ rowid: Int64) {
        if wide == nil, rowid >= 0, rowid <= Int64(UInt32.max) {
            if count % Self.chunkSize == 0 { narrow.append(Self.chunk(UInt32.self)) }
            narrow[narrow.count - 1].append(UInt32(rowid))
        } else {
            if wide == nil {
                wide = narrow.map { chunk in var wider = Self.chunk(Int64.self); wider.append(contentsOf: chunk.map(Int64.init)); return wider }
                narrow = []
            }
            if count % Self.chunkSize == 0 { wide!.append(Self.chunk(Int64.self)) }
            wide![wide!.count - 1].append(rowid)
        }
        count += 1
    }

    private static func chunk<T>(_ type: T.Type) -> [T] {
        var chunk: [T] = []
        chunk.reserveCapacity(chunkSize)
        return chunk
    }

    subscript(index: Int) -> Int64 {
        let chunk = index >> Self.chunkBits, offset = index & (Self.chunkSize - 1)
        if let wide { return wide[chunk][offset] }
        return Int64(narrow[chunk][offset])
    }

    /// Rowids from `range`, in order.
    func slice(_ range: Range<Int>) -> [Int64] { range.map { self[$0] } }

    /// Gives back the room the last chunk kept for growth.
    mutating func compact() {
        if wide != nil, let last = wide!.popLast() {
            wide!.append(last.withUnsafeBufferPointer { Array($0) })
        } else if let last = narrow.popLast() {
            narrow.append(last.withUnsafeBufferPointer { Array($0) })
        }
    }
}
