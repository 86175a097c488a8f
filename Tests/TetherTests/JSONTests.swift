import XCTest
@testable import Tether

/// The JSON reader: what a broken or hostile server can send (issue 7,
/// cases 7 and 8, and their class).
final class JSONTests: XCTestCase {
    private func parse(_ text: String) throws -> JSON { try JSON.parse(text) }

    func testNumbersBeyondInt64AndDoubleKeepTheirText() throws {
        XCTAssertEqual(try parse("9223372036854775807"), .integer(.max))
        XCTAssertEqual(try parse("-9223372036854775808"), .integer(.min))
        XCTAssertEqual(try parse("9223372036854775808"), .number("9223372036854775808"))
        XCTAssertEqual(try parse("-9223372036854775809"), .number("-9223372036854775809"))
        XCTAssertEqual(try parse("123456789012345678901234567890"), .number("123456789012345678901234567890"))
        XCTAssertEqual(try parse("1e400"), .number("1e400"))
        XCTAssertEqual(try parse("-1.5E+3"), .real(-1500))
        XCTAssertEqual(try parse("0.1"), .real(0.1))
        XCTAssertEqual(try parse("-0"), .integer(0))
        XCTAssertEqual(try parse("[18446744073709551616]").serialized(), "[18446744073709551616]")
    }

    /// A real attribute took any integer as a Double: 2^53 + 1 came back as
    /// 2^53, silently. Only exact conversions are made; the rest is JSON.
    func testIntegersInARealAttributeConvertOnlyWhenExact() {
        XCTAssertEqual(Value(json: .integer(3), type: .real), .real(3))
        XCTAssertEqual(Value(json: .integer(9_007_199_254_740_993), type: .real), .json("9007199254740993"))
        XCTAssertEqual(Value(json: .integer(.max), type: .real), .json("9223372036854775807"))
        XCTAssertEqual(Value(json: .number("1e400"), type: .real), .json("1e400"))
        XCTAssertEqual(Value(json: .number("18446744073709551616"), type: .integer), .json("18446744073709551616"))
    }

    func testKeysAndStringsMayHoldNULAndCompareByBytes() throws {
        let parsed = try parse(#"{"a\u0000b": 1, "a": 2, "e\u0301": 3, "é": 4}"#)
        XCTAssertEqual(parsed.objectValue?.count, 4, "a key with NUL, its prefix, and canonically equal keys are distinct")
        XCTAssertEqual(parsed["a\u{0}b"], .integer(1))
        XCTAssertEqual(parsed["a"], .integer(2))
        XCTAssertEqual(parsed["e\u{301}"], .integer(3))
        XCTAssertEqual(parsed["é"], .integer(4))
        XCTAssertEqual(try parse(parsed.serialized()), parsed)
    }

    func testAKeyGivenTwiceKeepsItsPlaceAndItsLastValue() throws {
        XCTAssertEqual(try parse(#"{"a": 1, "b": 2, "a": 3}"#), .object([("a", .integer(3)), ("b", .integer(2))]))
        // Past the scan limit the duplicate is found through a table.
        let many = (0..<40).map { #""k\#($0)": \#($0)"# }.joined(separator: ",")
        let parsed = try parse("{\(many), \"k7\": \"last\"}")
        XCTAssertEqual(parsed.objectValue?.count, 40)
        XCTAssertEqual(parsed.objectValue?[7].value, .string("last"))
    }

    func testBrokenUnicodeIsReplacedNotFatal() throws {
        XCTAssertEqual(try parse(#""\ud83d\ude00""#), .string("😀"))
        XCTAssertEqual(try parse(#""\ud800x""#), .string("\u{FFFD}x"), "a lone high surrogate")
        XCTAssertEqual(try parse(#""\udc00""#), .string("\u{FFFD}"), "a lone low surrogate")
        XCTAssertEqual(try parse(#""\ud800\u0041""#), .string("\u{FFFD}A"), "a high surrogate before a non-surrogate")
        XCTAssertEqual(try JSON.parse([0x22, 0x61, 0xFF, 0xC3, 0x22]), .string("a\u{FFFD}\u{FFFD}"), "invalid UTF-8")
        XCTAssertEqual(try JSON.parse([0x22, 0x09, 0x01, 0x22]), .string("\t\u{1}"), "raw control characters")
    }

    func testMalformedTextIsAProtocolErrorSayingWhere() {
        for text in ["", " ", "{", "[1,]", "[1 2]", "01", "1.", "-", ".5", "1e", "tru", "nul", #""abc"#, #"{"a" 1}"#,
                     #"{"a":1,}"#, "{1:2}", "1 2", #""\x""#, #""\u12""#, #""\u12G4""#, "[", "]", "+1", "NaN", "Infinity"] {
            XCTAssertThrowsError(try parse(text), text) { error in
                XCTAssertEqual((error as? TetherError)?.kind, .protocol, text)
                XCTAssertTrue((error as? TetherError)?.message.contains("at byte") ?? false, text)
            }
        }
    }

    func testDeepNestingIsRefusedNotAStackOverflow() throws {
        let depth = JSONReader.maximumDepth
        XCTAssertNoThrow(try parse(String(repeating: "[", count: depth) + String(repeating: "]", count: depth)))
        for opener in ["[", #"{"a":"#] {
            XCTAssertThrowsError(try parse(String(repeating: opener, count: 1_000_000))) { error in
                XCTAssertEqual((error as? TetherError)?.kind, .protocol)
            }
        }
    }

    func testSerializingEscapesEveryControlCharacterAndRoundTrips() throws {
        let everything = String(decoding: (0..<0x80).map { UInt8($0) }, as: UTF8.self) + "é😀\u{FFFF}"
        let value = JSON.object([(everything, .array([.string(everything), .real(1e-7), .real(-0.0), .real(1e300),
                                                      .integer(.min), .number("1e999"), .bool(false), .null]))])
        let text = value.serialized()
        XCTAssertFalse(text.utf8.contains { $0 < 0x20 }, "no raw control character in the output")
        XCTAssertEqual(try JSON.parse(text), value)
        XCTAssertEqual(JSON.object([("b", .integer(1)), ("a", .integer(2))]).serialized(sortKeys: true), #"{"a":2,"b":1}"#)
    }

    /// Retry-After and Backoff are seconds from the server: a huge one
    /// overflowed the conversion to milliseconds and trapped.
    func testWaitHeadersFromTheServerAreCapped() {
        func response(_ header: String, _ value: String, status: Int = 503) -> HTTPResponse {
            HTTPResponse(status: status, headers: [(header, value)], body: [])
        }
        let longest = Exchange.longestBackoffMilliseconds
        XCTAssertEqual(Exchange.retryDelay(.success(response("Retry-After", "9223372036854775807")), attempt: 0), longest)
        XCTAssertEqual(Exchange.retryDelay(.success(response("Retry-After", "2")), attempt: 0), 2_000)
        XCTAssertEqual(Exchange.retryDelay(.success(response("Retry-After", "-5")), attempt: 0), Exchange.firstBackoffMilliseconds)
        let backoff = ServerBackoff()
        backoff.heed(response("Backoff", "99999999999999999999", status: 200))
        XCTAssertEqual(backoff.remainingMilliseconds(), 0, "not a number Int64 holds: ignored")
        backoff.heed(response("Backoff", "9223372036854775807", status: 200))
        XCTAssertGreaterThan(backoff.remainingMilliseconds(), ServerBackoff.longestMilliseconds - 1_000)
        XCTAssertLessThanOrEqual(backoff.remainingMilliseconds(), ServerBackoff.longestMilliseconds)
    }

    /// A 503's or 429's Retry-After pauses the periodic rounds as Backoff
    /// does (the longer of the two); on another status it is not a backoff.
    func testRetryAfterOfABusyServerIsABackoff() {
        let other = ServerBackoff()
        other.heed(HTTPResponse(status: 200, headers: [("Retry-After", "60")], body: []))
        XCTAssertEqual(other.remainingMilliseconds(), 0)
        let busy = ServerBackoff()
        busy.heed(HTTPResponse(status: 429, headers: [("Retry-After", "60"), ("Backoff", "5")], body: []))
        XCTAssertGreaterThan(busy.remainingMilliseconds(), 55_000)
        let both = ServerBackoff()
        both.heed(HTTPResponse(status: 503, headers: [("Retry-After", "5"), ("Backoff", "3600")], body: []))
        XCTAssertGreaterThan(both.remainingMilliseconds(), 3_000_000, "an hour's Backoff is heeded whole")
    }

    /// The compact id list of batched answers keeps ids byte for byte.
    func testIDListKeepsIdsExactly() throws {
        let ids = ["", "a", "e\u{301}", "\u{E9}", "x\u{0}y", String(repeating: "long-", count: 40), "日本"]
        var list = IDList()
        for id in ids { try list.append(Array(id.utf8)) }
        list.compact()
        XCTAssertEqual(list.count, ids.count)
        for (index, id) in ids.enumerated() { XCTAssertTrue(list[index].utf8.elementsEqual(id.utf8), id.debugDescription) }
        XCTAssertEqual(list.slice(1..<3).map { Array($0.utf8) }, [Array("a".utf8), Array("e\u{301}".utf8)])
        XCTAssertEqual(IDList(ids).count, ids.count)
    }
}
