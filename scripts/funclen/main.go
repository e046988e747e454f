// Command funclen lists the functions of a Go source tree by length, longest
// first, to hold the rule that no function grows past about 60 lines.
//
//	funclen [-max N] [-tests] [dir|file ...]
//
// Each line is "<lines> <file>:<line> <name>", methods named "(Type).Name".
// A function's length runs from its func keyword to its closing brace, doc
// comment excluded; function literals count as part of the function around
// them, and those outside any function (package-level vars) are not listed.
// Files with the standard "// Code generated ... DO NOT EDIT." header, test
// files (unless -tests) and vendor, .git and testdata directories are
// skipped. With -max N the exit status is 1 when any function is longer
// than N lines; those are the first lines of the output.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// funcLen is one listed function.
type funcLen struct {
	Lines int
	File  string
	Line  int
	Name  string
}

func (f funcLen) String() string {
	return fmt.Sprintf("%d %s:%d %s", f.Lines, f.File, f.Line, f.Name)
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run is main with its arguments and outputs passed in; it returns the exit
// status: 0, 1 when a function is longer than -max, 2 on a usage or parse
// error.
func run(args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("funclen", flag.ContinueOnError)
	fl.SetOutput(stderr)
	maxLines := fl.Int("max", 0, "exit 1 if any function is longer than `N` lines (0: no limit)")
	tests := fl.Bool("tests", false, "include _test.go files")
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: funclen [-max N] [-tests] [dir|file ...]")
		fl.PrintDefaults()
	}
	if err := fl.Parse(args); err != nil {
		return 2
	}
	if *maxLines < 0 {
		fl.Usage()
		return 2
	}
	roots := fl.Args()
	if len(roots) == 0 {
		roots = []string{"."}
	}
	funcs, err := collect(roots, *tests)
	if err != nil {
		fmt.Fprintln(stderr, "funclen:", err)
		return 2
	}
	over := 0
	for _, f := range funcs {
		fmt.Fprintln(stdout, f)
		if *maxLines > 0 && f.Lines > *maxLines {
			over++
		}
	}
	if over > 0 {
		fmt.Fprintf(stderr, "funclen: %d function(s) longer than %d lines (the first %d above)\n", over, *maxLines, over)
		return 1
	}
	return 0
}

// skipDirs are directories the go tool does not build from.
var skipDirs = map[string]bool{"vendor": true, ".git": true, "testdata": true}

// collect lists the functions of the .go files under the roots, longest
// first (then by file and line).
func collect(roots []string, tests bool) ([]funcLen, error) {
	fset := token.NewFileSet()
	var funcs []funcLen
	for _, root := range roots {
		found, err := walk(fset, root, tests)
		if err != nil {
			return nil, err
		}
		funcs = append(funcs, found...)
	}
	slices.SortFunc(funcs, func(a, b funcLen) int {
		return cmp.Or(cmp.Compare(b.Lines, a.Lines), cmp.Compare(a.File, b.File), cmp.Compare(a.Line, b.Line))
	})
	return funcs, nil
}

// walk lists the functions of the .go files under root, a directory or
// one file.
func walk(fset *token.FileSet, root string, tests bool) ([]funcLen, error) {
	var funcs []funcLen
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || (!tests && strings.HasSuffix(path, "_test.go")) {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		found, err := fileFuncs(fset, path, src)
		funcs = append(funcs, found...)
		return err
	})
	return funcs, err
}

// fileFuncs lists the functions and methods with a body declared in one
// source file, none if the file is generated.
func fileFuncs(fset *token.FileSet, name string, src []byte) ([]funcLen, error) {
	f, err := parser.ParseFile(fset, name, src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	if ast.IsGenerated(f) {
		return nil, nil
	}
	var funcs []funcLen
	for _, decl := range f.Decls {
		fd, ok := decl.(*ast.FuncDecl)
		if !ok || fd.Body == nil { // no body: implemented in assembly
			continue
		}
		start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
		funcs = append(funcs, funcLen{
			Lines: end.Line - start.Line + 1,
			File:  name,
			Line:  start.Line,
			Name:  funcName(fd),
		})
	}
	return funcs, nil
}

// funcName is "Name" for a function and "(Type).Name" for a method, with
// the receiver's pointer and type parameters dropped.
func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	return "(" + recvType(fd.Recv.List[0].Type) + ")." + fd.Name.Name
}

func recvType(e ast.Expr) string {
	switch t := e.(type) {
	case *ast.Ident:
		return t.Name
	case *ast.StarExpr:
		return recvType(t.X)
	case *ast.ParenExpr:
		return recvType(t.X)
	case *ast.IndexExpr:
		return recvType(t.X)
	case *ast.IndexListExpr:
		return recvType(t.X)
	}
	return "?"
}
