module perfbuf.dev/perfbuf

go 1.19
