// Package jsonscan is the bridge's one JSON scanner, for the paths where encoding/json's decoding costs
// too much: it validates and walks a JSON value in one pass without decoding it, and allocates only for
// errors. The publisher reads an event's routing members and JetStream's acknowledgements with it.
//
// A Scanner reads one value. Kind tells what comes next; Object and Member, or Array and Elem, step into
// a container; String and Number read scalars as written (Unquote decodes a string); Skip passes over
// any value at full speed; End checks that nothing follows. Errors are sticky, so a walk checks once, at
// End. Equal and EqualFold match a member's key as encoding/json does for a map and for a struct field.
// Strict reads a whole value for what readers may read in different ways (a key given twice, an
// unpaired surrogate escape), for the bodies the bridge forwards.
//
// It accepts exactly what encoding/json accepts (FuzzScanner compares the two): RFC 8259 with invalid
// UTF-8 allowed in strings, and at most MaxDepth nested objects and arrays. Its errors are *SyntaxError,
// with the offset and encoding/json's wording, or *KindError when the caller asks for another kind of
// value than comes.
package jsonscan
