package bench

import (
	"image"
	"image/color"
	"strings"
	"unicode"
)

// glyphs is a 3×5 bitmap font: five rows of three bits, high bit on the left.
// Lower case draws as upper case; anything missing draws as '?'.
var glyphs = map[rune][5]uint8{
	'A': {2, 5, 7, 5, 5}, 'B': {6, 5, 6, 5, 6}, 'C': {3, 4, 4, 4, 3}, 'D': {6, 5, 5, 5, 6},
	'E': {7, 4, 6, 4, 7}, 'F': {7, 4, 6, 4, 4}, 'G': {3, 4, 5, 5, 3}, 'H': {5, 5, 7, 5, 5},
	'I': {7, 2, 2, 2, 7}, 'J': {1, 1, 1, 5, 2}, 'K': {5, 5, 6, 5, 5}, 'L': {4, 4, 4, 4, 7},
	'M': {5, 7, 7, 5, 5}, 'N': {6, 5, 5, 5, 5}, 'O': {2, 5, 5, 5, 2}, 'P': {6, 5, 6, 4, 4},
	'Q': {2, 5, 5, 6, 3}, 'R': {6, 5, 6, 5, 5}, 'S': {3, 4, 2, 1, 6}, 'T': {7, 2, 2, 2, 2},
	'U': {5, 5, 5, 5, 7}, 'V': {5, 5, 5, 5, 2}, 'W': {5, 5, 7, 7, 5}, 'X': {5, 5, 2, 5, 5},
	'Y': {5, 5, 2, 2, 2}, 'Z': {7, 1, 2, 4, 7},
	'0': {7, 5, 5, 5, 7}, '1': {2, 6, 2, 2, 7}, '2': {6, 1, 2, 4, 7}, '3': {6, 1, 2, 1, 6},
	'4': {5, 5, 7, 1, 1}, '5': {7, 4, 6, 1, 6}, '6': {3, 4, 7, 5, 7}, '7': {7, 1, 2, 2, 2},
	'8': {7, 5, 7, 5, 7}, '9': {7, 5, 7, 1, 6},
	' ': {}, '.': {0, 0, 0, 0, 2}, ',': {0, 0, 0, 2, 4}, '=': {0, 7, 0, 7, 0},
	'-': {0, 0, 7, 0, 0}, ':': {0, 2, 0, 2, 0}, '/': {1, 1, 2, 4, 4}, '(': {1, 2, 2, 2, 1},
	')': {4, 2, 2, 2, 4}, '%': {5, 1, 2, 4, 5}, '>': {4, 2, 1, 2, 4}, '<': {1, 2, 4, 2, 1},
	'+': {0, 2, 7, 2, 0}, '?': {6, 1, 2, 0, 2}, '*': {0, 5, 2, 5, 0},
}

// Font metrics at scale 1: a glyph is 3×5 and advances 4 pixels.
const (
	glyphW   = 3
	glyphH   = 5
	glyphAdv = 4
)

// textWidth is the width in pixels of s drawn at scale.
func textWidth(s string, scale int) int {
	return len([]rune(s)) * glyphAdv * scale
}

// drawText draws s with its top-left corner at (x, y), each font pixel a
// scale×scale square.
func drawText(img *image.RGBA, x, y int, s string, scale int, c color.Color) {
	for _, r := range normalize(s) {
		g, ok := glyphs[r]
		if !ok {
			g = glyphs['?']
		}
		for row := range glyphH {
			for col := range glyphW {
				if g[row]&(1<<(glyphW-1-col)) == 0 {
					continue
				}
				for dy := range scale {
					for dx := range scale {
						img.Set(x+col*scale+dx, y+row*scale+dy, c)
					}
				}
			}
		}
		x += glyphAdv * scale
	}
}

// normalize maps s onto the font's characters.
func normalize(s string) string {
	s = strings.NewReplacer("≥", ">=", "≤", "<=", "µ", "U", "×", "X", "—", "-", "–", "-").Replace(s)
	return strings.Map(unicode.ToUpper, s)
}
