// The standard library decomposes text for its own comparisons; without
// Foundation, its SPI is the one canonical decomposition at hand.
@_spi(_Unicode) import Swift

extension String {
    /// The text's scalars in canonical decomposition (NFD).
    var canonicalDecomposition: [Unicode.Scalar] { Array(_nfd) }
}
