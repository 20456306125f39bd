package bench

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strconv"
	"strings"
)

// Chart layout, in pixels.
const (
	chartW     = 1100
	labelW     = 520 // the row labels, left of the bars
	rowH       = 24
	barH       = 14
	topMargin  = 44
	bottomPad  = 36
	rightPad   = 70 // room for the ratio printed after a bar
	fontScale  = 2
	chartMaxX  = 2.0 // the ratio at the right end of the scale
	labelChars = (labelW - 16) / (glyphAdv * fontScale)
)

var (
	colWhite = color.RGBA{255, 255, 255, 255}
	colBlack = color.RGBA{20, 20, 20, 255}
	colGrey  = color.RGBA{170, 170, 170, 255}
	colLight = color.RGBA{225, 225, 225, 255}
	colGreen = color.RGBA{60, 160, 80, 255}
	colRed   = color.RGBA{205, 60, 50, 255}
	colInfo  = color.RGBA{140, 150, 170, 255}
)

// WriteChart draws one horizontal bar per row: its length the ratio on a
// linear scale from 0 to chartMaxX, a grey line at 1.0, a black tick at the
// goal's bound, green when met, red when not, grey-blue for rows with no
// goal. Labels are the table's numbers and the rows' descriptions.
func (r *Report) WriteChart(w io.Writer) error {
	h := topMargin + rowH*max(1, len(r.Rows)) + bottomPad
	img := image.NewRGBA(image.Rect(0, 0, chartW, h))
	fill(img, img.Bounds(), colWhite)
	drawText(img, 8, 10, "kaas bench: ratio ours / reference (grey line 1.0, black tick = goal bound)", fontScale, colBlack)

	x0, x1 := labelW, chartW-rightPad
	scale := func(v float64) int {
		v = math.Max(0, math.Min(v, chartMaxX))
		return x0 + int(v/chartMaxX*float64(x1-x0))
	}
	// Grid at every 0.25, stronger at 1.0.
	for v := 0.0; v <= chartMaxX+1e-9; v += 0.25 {
		c := colLight
		if v == 1 {
			c = colGrey
		}
		x := scale(v)
		fill(img, image.Rect(x, topMargin-4, x+1, h-bottomPad+4), c)
	}
	for i, row := range r.Rows {
		y := topMargin + i*rowH
		label := fmt.Sprintf("%2d %s", i+1, row.What)
		if len([]rune(normalize(label))) > labelChars {
			label = string([]rune(normalize(label))[:labelChars-1]) + "."
		}
		drawText(img, 8, y+(rowH-glyphH*fontScale)/2, label, fontScale, colBlack)

		c := colInfo
		switch {
		case row.Target == "info":
		case row.Met:
			c = colGreen
		default:
			c = colRed
		}
		by := y + (rowH-barH)/2
		end := scale(row.Ratio)
		fill(img, image.Rect(x0, by, max(end, x0+1), by+barH), c)
		if row.Ratio > chartMaxX { // an arrow head: the bar runs off the scale
			for k := range barH / 2 {
				fill(img, image.Rect(end, by+k, end+barH/2-k, by+barH-k), c)
			}
		}
		if b, ok := bound(row.Target); ok {
			tx := scale(b)
			fill(img, image.Rect(tx-1, by-3, tx+2, by+barH+3), colBlack)
		}
		drawText(img, min(end, x1)+barH/2+4, y+(rowH-glyphH*fontScale)/2, num(row.Ratio), fontScale, colBlack)
	}
	// Axis labels.
	for _, v := range []float64{0, 0.5, 1, 1.5, 2} {
		s := strconv.FormatFloat(v, 'f', -1, 64)
		drawText(img, scale(v)-textWidth(s, fontScale)/2, h-bottomPad+10, s, fontScale, colBlack)
	}
	return png.Encode(w, img)
}

// bound parses the number of a target such as "≥ 0.8" or "≤ 1.25".
func bound(target string) (float64, bool) {
	f := strings.Fields(target)
	if len(f) != 2 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[1], 64)
	return v, err == nil
}

func fill(img *image.RGBA, r image.Rectangle, c color.RGBA) {
	r = r.Intersect(img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			img.SetRGBA(x, y, c)
		}
	}
}
