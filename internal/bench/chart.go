package bench

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Chart layout.
const (
	chartMaxX  = 2.0 // the ratio at the right end of the scale
	chartW     = 11 * vg.Inch
	chartRowH  = 0.24 * vg.Inch
	chartPad   = 1.1 * vg.Inch // title and axis
	labelChars = 62
)

var (
	colGrey  = color.RGBA{170, 170, 170, 255}
	colBlack = color.RGBA{20, 20, 20, 255}
	colGreen = color.RGBA{60, 160, 80, 255}
	colRed   = color.RGBA{205, 60, 50, 255}
	colInfo  = color.RGBA{140, 150, 170, 255}
)

// WriteChart draws one horizontal bar per row with gonum's plot: its length
// the ratio on a linear scale from 0 to chartMaxX (a bar running off the
// scale ends in an arrow head), a grey line at 1.0, a black tick at the
// goal's bound, green when met, red when not, grey-blue for rows with no
// goal. Labels are the table's numbers and the rows' descriptions.
func (r *Report) WriteChart(w io.Writer) error {
	p := plot.New()
	p.Title.Text = "kaas-bench: ratio ours / reference (grey line 1.0, black tick = goal bound)"
	p.X.Min, p.X.Max = 0, chartMaxX
	p.X.Tick.Marker = plot.ConstantTicks(ticks())
	p.Add(plotter.NewGrid())
	labels := make([]string, len(r.Rows))
	for i, row := range r.Rows {
		label := fmt.Sprintf("%2d %s", i+1, row.What)
		if rs := []rune(label); len(rs) > labelChars {
			label = string(rs[:labelChars-1]) + "…"
		}
		labels[len(r.Rows)-1-i] = label // the first row on top
	}
	p.NominalY(labels...)
	p.Y.Tick.Label.Font.Size = font.Length(8)
	p.Add(bars{rows: r.Rows})
	height := chartPad + chartRowH*vg.Length(max(1, len(r.Rows)))
	c := vgimg.New(chartW, height)
	p.Draw(draw.New(c))
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

func ticks() []plot.Tick {
	var out []plot.Tick
	for v := 0.0; v <= chartMaxX+1e-9; v += 0.25 {
		t := plot.Tick{Value: v}
		if math.Mod(v, 0.5) == 0 {
			t.Label = strconv.FormatFloat(v, 'f', -1, 64)
		}
		out = append(out, t)
	}
	return out
}

// bars is the chart's plotter: one bar per row, row i at y = n-1-i.
type bars struct{ rows []Row }

func (b bars) DataRange() (xmin, xmax, ymin, ymax float64) {
	return 0, chartMaxX, -0.5, float64(len(b.rows)) - 0.5
}

func (b bars) Plot(c draw.Canvas, p *plot.Plot) {
	trX, trY := p.Transforms(&c)
	n := len(b.rows)
	half := chartRowH * 0.3
	one := trX(1)
	c.StrokeLine2(draw.LineStyle{Color: colGrey, Width: vg.Points(1)}, one, c.Min.Y, one, c.Max.Y)
	for i, row := range b.rows {
		y := trY(float64(n - 1 - i))
		col := colInfo
		switch {
		case row.Target == "info":
		case row.Met:
			col = colGreen
		default:
			col = colRed
		}
		x0, x1 := trX(0), trX(math.Max(0, math.Min(row.Ratio, chartMaxX)))
		bar := []vg.Point{{X: x0, Y: y - half}, {X: x1, Y: y - half}, {X: x1, Y: y + half}, {X: x0, Y: y + half}}
		if row.Ratio > chartMaxX { // an arrow head: the bar runs off the scale
			bar = []vg.Point{{X: x0, Y: y - half}, {X: x1 - half, Y: y - half}, {X: x1, Y: y}, {X: x1 - half, Y: y + half}, {X: x0, Y: y + half}}
		}
		c.FillPolygon(col, c.ClipPolygonXY(bar))
		if v, ok := bound(row.Target); ok {
			tx := trX(v)
			c.StrokeLine2(draw.LineStyle{Color: colBlack, Width: vg.Points(2)}, tx, y-half*1.4, tx, y+half*1.4)
		}
		sty := draw.TextStyle{Color: colBlack, Font: font.From(plot.DefaultFont, 8), Handler: plot.DefaultTextHandler, YAlign: draw.YCenter}
		at := x1 + 4
		if row.Ratio > chartMaxX { // off the scale: the number inside the arrow
			sty.Color, sty.XAlign, at = color.White, draw.XRight, x1-half-4
		}
		c.FillText(sty, vg.Point{X: at, Y: y}, num(row.Ratio))
	}
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
