package wire

// Range is an inclusive range of versions of one API.
type Range struct{ Min, Max int16 }

// Supported answers which versions of an API key are served (and whether
// the key is served at all). The broker's handler files each register their
// key and versions once; the broker passes its lookup to Decode.
type Supported func(key int16) (Range, bool)
