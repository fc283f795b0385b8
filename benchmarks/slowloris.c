/*
 * The HTTP suite's slowloris client: connections that start a request and never finish its
 * head, so only a head timeout frees the server of them.
 *
 *   slowloris PORT N SECONDS [PATH]
 *
 * Opens N connections to 127.0.0.1:PORT (at most 64 connects in flight, as http_client.c).
 * On each, as soon as it is connected, it sends "GET PATH HTTP/1.1\r\nHost: 127.0.0.1\r\n
 * X-a: " and from then on one more byte of that header's value ('a') every second, so the
 * head is never complete. When every connect has succeeded or failed it prints
 *
 *   {"type": "open", "opened": ..., "failed": ..., "seconds": ..., "first_error": "..."}
 *
 * and trickles on for SECONDS more (or until its stdin reaches EOF: the runner's way to
 * stop it early), then prints one line:
 *
 *   {"type": "done", "opened": ..., "failed": ..., "closed": ..., "still_open": ...,
 *    "close_s": {"min": ..., "median": ..., "max": ...}, ...}
 *
 * A connection counts as closed by the server when a read sees EOF or a reset, or a write
 * fails with EPIPE or ECONNRESET; its time-to-close runs from the moment its connect
 * completed (the server saw its first head byte a moment later). Whatever the server sent
 * first on a connection (a 408, say) is counted by status in "statuses". "late_max_s" is
 * the longest any byte was sent after it was due: a client that fell behind would trickle
 * slower than one byte a second.
 *
 * One thread, epoll, no dependencies: built by the harness at each run like http_client.c.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define CONNECTS_IN_FLIGHT 64
#define TICK_MS 50 /* how often due bytes are looked for */

enum state { UNUSED, CONNECTING, OPEN, CLOSED, FAILED };
enum how { BY_EOF, BY_RESET, BY_WRITE };

struct conn {
    int fd;
    enum state st;
    double connected_at; /* when the connect completed */
    double next_byte;    /* when the next header byte is due */
    double closed_after; /* seconds from connected_at to the server's close */
    int status;          /* status of the first response seen, 0: none, -1: not HTTP */
    int head_len;        /* bytes of that response's first line gathered */
    char head[16];
};

static char request[1024];
static size_t request_len;
static char first_error[160];
static long statuses[600], not_http;
static long closed_by[3];
static long bytes_sent;
static double late_max;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void note_error(const char *what) {
    if (!first_error[0]) snprintf(first_error, sizeof first_error, "%s", what);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int open_conn(int ep, struct conn *c, int port) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons(port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        note_error(strerror(errno));
        c->st = FAILED;
        return -1;
    }
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* each byte its own segment */
    if (connect(c->fd, (struct sockaddr *)&addr, sizeof addr) < 0 && errno != EINPROGRESS) {
        note_error(strerror(errno));
        close(c->fd);
        c->st = FAILED;
        return -1;
    }
    c->st = CONNECTING;
    struct epoll_event ev = {.events = EPOLLOUT, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_ADD, c->fd, &ev);
    return 0;
}

static void server_closed(int ep, struct conn *c, enum how how, double t) {
    epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    c->st = CLOSED;
    c->closed_after = t - c->connected_at;
    closed_by[how]++;
}

/* Connected (or refused): 0 with the request's start sent, or -1 (the conn is FAILED). */
static int finish_connect(int ep, struct conn *c) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err) {
        note_error(strerror(err));
        epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
        close(c->fd);
        c->st = FAILED;
        return -1;
    }
    c->connected_at = now();
    c->next_byte = c->connected_at + 1.0;
    c->st = OPEN;
    struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
    epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
    /* Far smaller than the socket buffer: one send takes it whole. */
    ssize_t n = send(c->fd, request, request_len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
        if (errno == EPIPE || errno == ECONNRESET) server_closed(ep, c, BY_WRITE, now());
        else note_error(strerror(errno));
        return 0;
    }
    bytes_sent += n;
    return 0;
}

/* Remember the status of the first response line the server sends. */
static void note_response(struct conn *c, const char *buf, ssize_t n) {
    if (c->status != 0) return;
    for (ssize_t i = 0; i < n && c->head_len < (int)sizeof c->head - 1; i++)
        c->head[c->head_len++] = buf[i];
    if (c->head_len < 12) return;
    c->head[c->head_len] = 0;
    int code = 0;
    if (strncmp(c->head, "HTTP/1.", 7) == 0 && sscanf(c->head + 9, "%3d", &code) == 1 && code > 0 &&
        code < 600) {
        c->status = code;
        statuses[code]++;
    } else {
        c->status = -1;
        not_http++;
    }
}

/* The socket is readable or hung up: read what there is, note an EOF or a reset. */
static void on_readable(int ep, struct conn *c) {
    char buf[4096];
    for (;;) {
        ssize_t n = recv(c->fd, buf, sizeof buf, 0);
        if (n > 0) {
            note_response(c, buf, n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
        server_closed(ep, c, n == 0 ? BY_EOF : BY_RESET, now());
        return;
    }
}

/* Send the header bytes that are due: one per connection per second. */
static void trickle(int ep, struct conn *conns, int n) {
    double t = now();
    for (int i = 0; i < n; i++) {
        struct conn *c = &conns[i];
        if (c->st != OPEN || c->next_byte > t) continue;
        if (t - c->next_byte > late_max) late_max = t - c->next_byte;
        ssize_t r = send(c->fd, "a", 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (r == 1) {
            bytes_sent++;
        } else if (r < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            server_closed(ep, c, BY_WRITE, t);
            continue;
        } else if (r < 0 && errno != EAGAIN) {
            note_error(strerror(errno));
        }
        c->next_byte += 1.0;
    }
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s PORT N SECONDS [PATH]\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]), n = atoi(argv[2]);
    double seconds = atof(argv[3]);
    const char *path = argc == 5 ? argv[4] : "/";
    if (port <= 0 || n <= 0 || seconds < 0) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    request_len = (size_t)snprintf(request, sizeof request,
                                   "GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nX-a: ", path);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    struct conn *conns = calloc((size_t)n, sizeof *conns);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    /* stdin EOF stops us early; a stdin epoll cannot watch (/dev/null) is simply ignored. */
    struct epoll_event sev = {.events = EPOLLIN, .data.ptr = NULL};
    int watch_stdin = epoll_ctl(ep, EPOLL_CTL_ADD, 0, &sev) == 0;

    int next = 0, pending = 0, opened = 0, failed = 0, announced = 0, stop = 0;
    double t0 = now(), end = 0, open_seconds = 0;
    struct epoll_event evs[256];
    while (!stop) {
        while (next < n && pending < CONNECTS_IN_FLIGHT) {
            if (open_conn(ep, &conns[next++], port) < 0) failed++;
            else pending++;
        }
        if (!announced && opened + failed == n) {
            announced = 1;
            open_seconds = now() - t0;
            end = now() + seconds;
            printf("{\"type\": \"open\", \"opened\": %d, \"failed\": %d, \"seconds\": %.3f, "
                   "\"first_error\": \"%s\"}\n", opened, failed, open_seconds, first_error);
            fflush(stdout);
        }
        if (announced && now() >= end) break;
        int k = epoll_wait(ep, evs, 256, TICK_MS);
        for (int i = 0; i < k; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c == NULL) {
                char sink[256];
                if (read(0, sink, sizeof sink) <= 0) {
                    epoll_ctl(ep, EPOLL_CTL_DEL, 0, NULL);
                    if (watch_stdin) stop = 1;
                }
                continue;
            }
            if (c->st == CONNECTING) {
                pending--;
                if (finish_connect(ep, c) < 0) failed++;
                else opened++;
            } else if (c->st == OPEN) {
                on_readable(ep, c);
            }
        }
        trickle(ep, conns, next);
    }
    /* Whatever the kernel already holds for us (a close that came with the deadline). */
    int k;
    while ((k = epoll_wait(ep, evs, 256, 0)) > 0) {
        int progress = 0;
        for (int i = 0; i < k; i++) {
            struct conn *c = evs[i].data.ptr;
            if (c != NULL && c->st == OPEN) {
                on_readable(ep, c);
                progress = 1;
            }
        }
        if (!progress) break;
    }

    double *closes = malloc(sizeof(double) * (size_t)n);
    int closed = 0, still = 0;
    for (int i = 0; i < n; i++) {
        if (conns[i].st == CLOSED) closes[closed++] = conns[i].closed_after;
        else if (conns[i].st == OPEN || conns[i].st == CONNECTING) still++;
    }
    qsort(closes, (size_t)closed, sizeof *closes, cmp_double);
    printf("{\"type\": \"done\", \"opened\": %d, \"failed\": %d, \"closed\": %d, "
           "\"still_open\": %d, \"open_seconds\": %.3f, \"seconds\": %.3f, ",
           opened, failed, closed, still, open_seconds, now() - t0);
    if (closed)
        printf("\"close_s\": {\"min\": %.3f, \"median\": %.3f, \"max\": %.3f}, ", closes[0],
               closed % 2 ? closes[closed / 2] : (closes[closed / 2 - 1] + closes[closed / 2]) / 2,
               closes[closed - 1]);
    else
        printf("\"close_s\": null, ");
    printf("\"closed_by\": {\"eof\": %ld, \"reset\": %ld, \"write\": %ld}, \"statuses\": {",
           closed_by[BY_EOF], closed_by[BY_RESET], closed_by[BY_WRITE]);
    const char *sep = "";
    for (int code = 0; code < 600; code++) {
        if (!statuses[code]) continue;
        printf("%s\"%d\": %ld", sep, code, statuses[code]);
        sep = ", ";
    }
    printf("}, \"not_http\": %ld, \"bytes_sent\": %ld, \"late_max_s\": %.3f, "
           "\"first_error\": \"%s\"}\n", not_http, bytes_sent, late_max, first_error);
    return 0;
}
