import XCTest
@testable import Tether

/// TextMatch's ASCII path (bytes compared, nothing folded or copied) must
/// answer as folding the scalars does, for every operator and folding.
final class TextMatchTests: XCTestCase {
    func testTheASCIIPathAnswersAsFoldingDoes() {
        var generator = SystemRandomNumberGenerator()
        let alphabet = Array("aAbBzZ@[`{ 09-_\u{7f}".unicodeScalars)   // the bytes around A-Z and a-z too
        func text() -> String {
            String(String.UnicodeScalarView((0..<Int.random(in: 0...6, using: &generator)).map { _ in
                alphabet.randomElement(using: &generator)!
            }))
        }
        let foldings: [Comparison.Options] = [[], [.caseInsensitive], [.diacriticInsensitive], [.caseInsensitive, .diacriticInsensitive]]
        for _ in 0..<20_000 {
            let subject = text(), pattern = text()
            for folding in foldings {
                let s = TextFolding.fold(subject, folding), p = TextFolding.fold(pattern, folding)
                let expected: [(Comparison.Operator, Bool)] = [
                    (.beginsWith, s.starts(with: p)),
                    (.endsWith, s.reversed().starts(with: p.reversed())),
                    (.contains, p.isEmpty || s.indices.contains { s[$0...].starts(with: p) }),
                ]
                for (op, answer) in expected {
                    XCTAssertEqual(TextMatch.matches(op, subject, pattern, folding), answer,
                                   "\(op) \(subject.debugDescription) \(pattern.debugDescription) \(folding)")
                }
            }
        }
        // Not both ASCII: the folding path, where a non-ASCII scalar folds to ASCII.
        XCTAssertTrue(TextMatch.matches(.beginsWith, "kelvin", "\u{212A}", [.caseInsensitive]))
        XCTAssertTrue(TextMatch.matches(.contains, "cafe\u{301}", "cafe", [.diacriticInsensitive]))
    }
}
