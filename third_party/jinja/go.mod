module github.com/ardanlabs/jinja

go 1.27.0
