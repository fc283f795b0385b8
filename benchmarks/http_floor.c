/*
 * The kernel's share of the HTTP benchmark: the same canned responder as transports.py's
 * HttpProtocol, in C on plain epoll, with no Python and no event-loop library.
 *
 *   http_floor [CPU [BODY_BYTES]]
 *
 * Listens on 127.0.0.1 (a free port), pins itself to CPU when given (-1: not pinned), and speaks the
 * benchmark's server protocol: one JSON "ready" line with its pid and port on stdout, then it
 * serves until stdin closes and says "done". Every request (ended by CRLF CRLF, pipelined or
 * not, split across reads or not) gets the canned response; the responses a read completes go
 * out in one send, as HttpProtocol's one write per data_received.
 *
 * Its server CPU µs per request is what the kernel's TCP loopback path costs on this machine
 * (recv, send, and the peer's receive processing, which loopback runs in the sender's
 * context): no Python server can go below it, which puts any ratio target in proportion.
 *
 * BODY_BYTES replaces the 13-byte body with that many bytes of 'x' (the HTTP suite's 64 KiB
 * response). A request with a Content-Length is answered once its whole body has arrived;
 * the body is read and dropped unscanned (the HTTP suite's 1 MiB upload).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>

static const char HEAD[] =
    "HTTP/1.1 200 OK\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: %zu\r\n"
    "Connection: keep-alive\r\n"
    "\r\n";
static char *RESPONSE;
static size_t RESPONSE_LEN;

/* The canned response: the head, then "Hello, World!" or body_bytes of 'x'. */
static void build_response(long body_bytes) {
    const char *hello = "Hello, World!";
    size_t body = body_bytes >= 0 ? (size_t)body_bytes : strlen(hello);
    RESPONSE = malloc(sizeof HEAD + 32 + body);
    if (!RESPONSE) { perror("malloc"); exit(1); }
    int head = sprintf(RESPONSE, HEAD, body);
    if (body_bytes >= 0) memset(RESPONSE + head, 'x', body);
    else memcpy(RESPONSE + head, hello, body);
    RESPONSE_LEN = (size_t)head + body;
}

struct conn {
    int matched;      /* bytes of CRLF CRLF matched at the end of the last read */
    int cl_matched;   /* bytes of CRLF "content-length:" matched, case-insensitively */
    int in_cl;        /* reading the digits of a Content-Length */
    size_t cl;        /* the Content-Length of the request whose head is being read */
    size_t body_left; /* body bytes of the current request still to arrive */
    char *out;        /* responses the kernel has not taken yet */
    size_t out_len, out_cap;
};

static struct conn *conns;
static int nconns;

static struct conn *conn_of(int fd) {
    if (fd >= nconns) {
        int n = fd * 2 + 64;
        conns = realloc(conns, n * sizeof *conns);
        if (!conns) { perror("realloc"); exit(1); }
        memset(conns + nconns, 0, (n - nconns) * sizeof *conns);
        nconns = n;
    }
    return &conns[fd];
}

static void drop(int ep, int fd) {
    struct conn *c = conn_of(fd);
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    close(fd);
    free(c->out);
    memset(c, 0, sizeof *c);
}

/* Send what is queued; 0 when it all went, 1 when the socket is full, -1 on error. */
static int flush_out(int fd, struct conn *c) {
    size_t off = 0;
    while (off < c->out_len) {
        ssize_t n = send(fd, c->out + off, c->out_len - off, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) break;
            return -1;
        }
        off += (size_t)n;
    }
    memmove(c->out, c->out + off, c->out_len - off);
    c->out_len -= off;
    return c->out_len ? 1 : 0;
}

/*
 * Requests completed by this read. The head ends at CRLF CRLF (matched byte by byte, the
 * match carried across reads); a Content-Length seen in it makes the request end that many
 * bytes later, and those body bytes are skipped in one step, not scanned: the floor of an
 * upload is the kernel's copy, not a byte loop of ours. No other framing (chunked) is read.
 */
static int count_requests(struct conn *c, const char *buf, size_t n) {
    static const char END[4] = {'\r', '\n', '\r', '\n'};
    static const char CL[] = "\r\ncontent-length:";
    const int cl_len = (int)sizeof CL - 1;
    int count = 0;
    size_t i = 0;
    while (i < n) {
        if (c->body_left) {
            size_t skip = n - i < c->body_left ? n - i : c->body_left;
            c->body_left -= skip;
            i += skip;
            if (!c->body_left) count++;
            continue;
        }
        char ch = buf[i++];
        if (c->in_cl) {
            if (ch >= '0' && ch <= '9') c->cl = c->cl * 10 + (size_t)(ch - '0');
            else if (ch != ' ' && ch != '\t') c->in_cl = 0;
        }
        if (tolower((unsigned char)ch) == CL[c->cl_matched]) {
            if (++c->cl_matched == cl_len) {
                c->in_cl = 1;
                c->cl = 0;
                c->cl_matched = 0;
            }
        } else {
            c->cl_matched = ch == '\r';
        }
        if (ch == END[c->matched]) {
            if (++c->matched == 4) {
                c->matched = 0;
                c->cl_matched = 0;
                c->in_cl = 0;
                if (c->cl) {
                    c->body_left = c->cl;
                    c->cl = 0;
                } else {
                    count++;
                }
            }
        } else {
            c->matched = ch == '\r';
        }
    }
    return count;
}

int main(int argc, char **argv) {
    build_response(argc > 2 ? atol(argv[2]) : -1);
    if (argc > 1 && atoi(argv[1]) >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(atoi(argv[1]), &set);
        if (sched_setaffinity(0, sizeof set, &set) != 0) { perror("sched_setaffinity"); return 1; }
    }
    int ls = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, IPPROTO_TCP);
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof addr;
    if (bind(ls, (struct sockaddr *)&addr, sizeof addr) || listen(ls, 1024) ||
        getsockname(ls, (struct sockaddr *)&addr, &alen)) {
        printf("{\"type\": \"error\", \"stage\": \"start\", \"error\": \"listen: %s\"}\n", strerror(errno));
        return 1;
    }
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls};
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    ev.data.fd = 0;
    epoll_ctl(ep, EPOLL_CTL_ADD, 0, &ev);
    printf("{\"type\": \"ready\", \"pid\": %d, \"port\": %d, \"cpu\": %s, "
           "\"loop_class\": \"C, epoll (no Python)\", \"version\": \"gcc -O2\", \"backend\": \"epoll\"}\n",
           getpid(), ntohs(addr.sin_port), argc > 1 && atoi(argv[1]) >= 0 ? argv[1] : "null");
    fflush(stdout);

    static char buf[256 * 1024];
    struct epoll_event evs[256];
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);
        if (n < 0 && errno == EINTR) continue;
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == 0) {
                if (read(0, buf, sizeof buf) <= 0) {
                    printf("{\"type\": \"done\", \"loop_errors\": 0}\n");
                    return 0;
                }
                continue;
            }
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    struct epoll_event cev = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
                    conn_of(c);
                }
                continue;
            }
            struct conn *c = conn_of(fd);
            int was_full = c->out_len > 0;
            if (evs[i].events & EPOLLIN) {
                ssize_t got = recv(fd, buf, sizeof buf, 0);
                if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                    drop(ep, fd);
                    continue;
                }
                int reqs = got > 0 ? count_requests(c, buf, (size_t)got) : 0;
                if (reqs) {
                    size_t need = c->out_len + (size_t)reqs * RESPONSE_LEN;
                    if (need > c->out_cap) {
                        c->out_cap = need * 2;
                        c->out = realloc(c->out, c->out_cap);
                        if (!c->out) { perror("realloc"); return 1; }
                    }
                    for (int r = 0; r < reqs; r++, c->out_len += RESPONSE_LEN)
                        memcpy(c->out + c->out_len, RESPONSE, RESPONSE_LEN);
                }
            }
            int st = c->out_len ? flush_out(fd, c) : 0;
            if (st < 0) {
                drop(ep, fd);
                continue;
            }
            if ((st == 1) != was_full) {
                struct epoll_event cev = {.events = EPOLLIN | (st == 1 ? EPOLLOUT : 0), .data.fd = fd};
                epoll_ctl(ep, EPOLL_CTL_MOD, fd, &cev);
            }
        }
    }
}
