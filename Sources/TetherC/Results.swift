// The C ABI, "results" section of include/tether.h.
import CTetherABI
import Glibc
import Tether

/// A fetch's answer as the host holds it, and what it has lent out: object
/// handles (one reference each) and id strings, lent by the core's
/// `RowLoans` batch by batch.
final class ResultsBox: Sendable {
    let results: FetchedResults
    private let owner: UInt
    /// Object handles and strdup'ed ids, by their bits.
    private let loans: RowLoans

    init(_ results: FetchedResults, owner: UInt) {
        self.results = results
        self.owner = owner
        loans = RowLoans(batchSize: results.batchSize) { returned in
            // A batch's handles under one lock, not a lock each.
            Handles.shared.release(returned.compactMap { $0.kind == .object ? OpaquePointer(bitPattern: $0.loan) : nil }, .object)
            for (kind, loan) in returned where kind == .id { free(UnsafeMutableRawPointer(bitPattern: loan)) }
        }
    }

    func object(at index: Int) throws -> OpaquePointer {
        let object = try results.object(at: index)
        let owner = self.owner
        let handle = try loans.loan(.object, row: index) { UInt(bitPattern: try objectHandle(object, owner: owner)) }
        return OpaquePointer(bitPattern: handle)!
    }

    /// Handles of the objects of rows `range`, one reference each for the
    /// caller (not loans); all or none.
    func objects(_ range: Range<Int>) throws -> [OpaquePointer] {
        let objects = try results.objects(in: range)
        return try Handles.shared.registerObjects(objects, owner: owner)
    }

    func id(at index: Int) throws -> UnsafePointer<CChar> {
        let id = try results.id(at: index)
        let text = try loans.loan(.id, row: index) { UInt(bitPattern: strdup(id)!) }
        return UnsafePointer(bitPattern: text)!
    }

    /// Gives back every loan: the handle is released.
    func releaseLoans() { loans.giveBackAll() }
}

private func resultsBox(_ results: OpaquePointer?) throws -> ResultsBox {
    try Handles.shared.resolve(results, .results, as: ResultsBox.self)
}

@_cdecl("tether_results_type")
public func tether_results_type(_ results: OpaquePointer?, _ out: UnsafeMutablePointer<tether_result_type>?) -> Int32 {
    call {
        let type: tether_result_type
        switch try resultsBox(results).results.type {
        case .objects: type = TETHER_RESULT_OBJECTS
        case .ids: type = TETHER_RESULT_IDS
        case .count: type = TETHER_RESULT_COUNT
        case .values: type = TETHER_RESULT_VALUES
        }
        try output(out, type)
    }
}

@_cdecl("tether_results_count")
public func tether_results_count(_ results: OpaquePointer?, _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try resultsBox(results).results.count) }
}

@_cdecl("tether_results_object_at")
public func tether_results_object_at(_ results: OpaquePointer?, _ index: Int,
                                     _ out: UnsafeMutablePointer<OpaquePointer?>?) -> Int32 {
    call {
        let box = try resultsBox(results)
        guard out != nil else { throw misuse("out is NULL") }
        try output(out, try box.object(at: try rowIndex(index, box)))
    }
}

@_cdecl("tether_results_objects")
public func tether_results_objects(_ results: OpaquePointer?, _ start: Int, _ out: UnsafeMutablePointer<OpaquePointer?>?,
                                   _ capacity: Int, _ outCount: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let box = try resultsBox(results)
        try requireRows(box)
        guard let out, let outCount else { throw misuse("out or out_count is NULL") }
        guard start >= 0, start <= box.results.count else { throw TetherError(.notFound, "no row at index \(start)") }
        let wanted = capacity < 0 ? Int.max : capacity  // a size_t past Int.max
        let handles = try box.objects(start..<(start + min(wanted, box.results.count - start)))
        for (offset, handle) in handles.enumerated() { out[offset] = handle }
        outCount.pointee = handles.count
    }
}

@_cdecl("tether_results_id_at")
public func tether_results_id_at(_ results: OpaquePointer?, _ index: Int,
                                 _ out: UnsafeMutablePointer<UnsafePointer<CChar>?>?) -> Int32 {
    call {
        let box = try resultsBox(results)
        guard out != nil else { throw misuse("out is NULL") }
        try output(out, try box.id(at: try rowIndex(index, box)))
    }
}

@_cdecl("tether_results_value_at")
public func tether_results_value_at(_ results: OpaquePointer?, _ index: Int, _ key: UnsafePointer<CChar>?,
                                    _ out: UnsafeMutablePointer<tether_value>?) -> Int32 {
    call {
        let box = try resultsBox(results)
        let fetched = box.results
        let key = try keyBytes(key)
        guard fetched.type == .values else {
            throw misuse("only a TETHER_RESULT_VALUES answer has values: read an object's with tether_object_peek")
        }
        let row = try rowIndex(index, box)
        guard let column = fetched.column(bytes: key) else {
            guard let name = String(validating: key, as: UTF8.self) else { throw TetherError(.invalid, "key is not valid UTF-8") }
            throw TetherError(.notFound, "the fetch did not ask for \(name.debugDescription)")
        }
        try fill(out, try fetched.value(at: row, column: column))
    }
}

/// A row index checked against the answer: a count has none.
private func requireRows(_ box: ResultsBox) throws {
    guard box.results.type != .count else { throw misuse("a count has no rows: read it with tether_results_count") }
}

private func rowIndex(_ index: Int, _ box: ResultsBox) throws -> Int {
    try requireRows(box)
    guard index >= 0, index < box.results.count else { throw TetherError(.notFound, "no row at index \(index)") }
    return index
}

@_cdecl("tether_results_change_count")
public func tether_results_change_count(_ results: OpaquePointer?, _ kind: tether_change,
                                        _ out: UnsafeMutablePointer<Int>?) -> Int32 {
    call { try output(out, try changes(of: kind, in: results).count) }
}

@_cdecl("tether_results_change_at")
public func tether_results_change_at(_ results: OpaquePointer?, _ kind: tether_change, _ index: Int,
                                     _ outOld: UnsafeMutablePointer<Int>?, _ outNew: UnsafeMutablePointer<Int>?) -> Int32 {
    call {
        let list = try changes(of: kind, in: results)
        guard index >= 0, index < list.count else { throw TetherError(.notFound, "no change at index \(index)") }
        // SIZE_MAX: no such index (the row was not in that answer).
        outOld?.pointee = list[index].from ?? -1
        outNew?.pointee = list[index].to ?? -1
    }
}

/// The changes of one kind, as (old index, new index) pairs.
private func changes(of kind: tether_change, in results: OpaquePointer?) throws -> [(from: Int?, to: Int?)] {
    let changes = try resultsBox(results).results.changes ?? ResultChanges()
    switch kind {
    case TETHER_CHANGE_DELETE: return changes.deleted.map { (from: $0, to: nil) }
    case TETHER_CHANGE_INSERT: return changes.inserted.map { (from: nil, to: $0) }
    case TETHER_CHANGE_MOVE: return changes.moved.map { ($0.from, $0.to) }
    case TETHER_CHANGE_UPDATE: return changes.updated.map { ($0.from, $0.to) }
    default: throw TetherError(.invalid, "unknown change kind \(kind.rawValue)")
    }
}

@_cdecl("tether_results_free")
public func tether_results_free(_ results: OpaquePointer?) -> Int32 {
    call {
        guard let results else { return }
        guard let box = try Handles.shared.release(results, .results) as? ResultsBox else { return }
        box.releaseLoans()
    }
}
