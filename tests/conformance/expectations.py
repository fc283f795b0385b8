"""Which CPython conformance tests ringloop skips or is expected to fail, and why.

Keys: `<module>.<Suite>.<test>`, applying to both ringloop backends; a `[io_uring]` or
`[epoll]` suffix narrows a key to one backend, `[all]` extends it to the asyncio oracle too.
See conftest.py. `CONFORMANCE_RUN_SKIPPED=1` ignores `SKIP`, to find entries that now pass.
"""

_ISSUE3 = "needs transports (issue 3)"
TCP = f"{_ISSUE3}: TCP/Unix stream transports (create_connection/create_server)"
UDP = f"{_ISSUE3}: datagram transports (create_datagram_endpoint)"
SSL = f"{_ISSUE3}: SSL/start_tls over stream transports"
SENDFILE = f"{_ISSUE3}: its fixture serves the peer with create_server"
SENDFILE_TR = f"{_ISSUE3}: loop.sendfile() on a stream transport"
ACCEPT = (
    f"{_ISSUE3}: drives SelectorEventLoop's _accept_connection, the accept loop of create_server"
)

# test id -> reason
SKIP: dict[str, str] = {
    # test_base_events.BaseEventLoopWithSelectorTests
    "test_base_events.BaseEventLoopWithSelectorTests.test_accept_connection_exception": ACCEPT,
    "test_base_events.BaseEventLoopWithSelectorTests.test_accept_connection_retry": ACCEPT,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_connection_ip_addr": TCP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_connection_ipv6_scope": TCP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_connection_no_inet_pton": TCP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_connection_service_name": TCP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_datagram_endpoint_allow_broadcast": UDP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_datagram_endpoint_existing_sock_unix": UDP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_datagram_endpoint_ip_addr": UDP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_datagram_endpoint_sock": UDP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_datagram_endpoint_sock_unix": UDP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_datagram_endpoint_sockopts": UDP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_server_ipv6": TCP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_server_soreuseport_only_defined": TCP,
    "test_base_events.BaseEventLoopWithSelectorTests.test_create_server_stream_bittype": TCP,
    # test_buffered_proto.BufferedProtocolTests
    "test_buffered_proto.BufferedProtocolTests.test_buffered_proto_create_connection": TCP,
    # test_events.EventLoopTests
    "test_events.EventLoopTests.test_connect_accepted_socket": TCP,
    "test_events.EventLoopTests.test_create_connection": TCP,
    "test_events.EventLoopTests.test_create_connection_local_addr": TCP,
    "test_events.EventLoopTests.test_create_datagram_endpoint": UDP,
    "test_events.EventLoopTests.test_create_datagram_endpoint_ipv6": UDP,
    "test_events.EventLoopTests.test_create_datagram_endpoint_sock": UDP,
    "test_events.EventLoopTests.test_create_server": TCP,
    "test_events.EventLoopTests.test_create_server_addr_in_use": TCP,
    "test_events.EventLoopTests.test_create_server_dual_stack": TCP,
    "test_events.EventLoopTests.test_create_server_reuse_port": TCP,
    "test_events.EventLoopTests.test_create_server_sock": TCP,
    "test_events.EventLoopTests.test_create_server_ssl": SSL,
    "test_events.EventLoopTests.test_create_server_ssl_match_failed": SSL,
    "test_events.EventLoopTests.test_create_server_ssl_verified": SSL,
    "test_events.EventLoopTests.test_create_server_ssl_verify_failed": SSL,
    "test_events.EventLoopTests.test_create_ssl_connection": SSL,
    "test_events.EventLoopTests.test_create_ssl_unix_connection": SSL,
    "test_events.EventLoopTests.test_create_unix_connection": TCP,
    "test_events.EventLoopTests.test_create_unix_server": TCP,
    "test_events.EventLoopTests.test_create_unix_server_path_socket_error": TCP,
    "test_events.EventLoopTests.test_create_unix_server_ssl": SSL,
    "test_events.EventLoopTests.test_create_unix_server_ssl_verified": SSL,
    "test_events.EventLoopTests.test_create_unix_server_ssl_verify_failed": SSL,
    "test_events.EventLoopTests.test_prompt_cancellation": (
        "ends with loop._stop_serving(sock), the hook asyncio's Server.close() calls; it comes"
        " with create_server (issue 3). The sock_recv cancellation it checks passes."
    ),
    "test_events.EventLoopTests.test_timeout_rounding": (
        "counts calls of an instance-patched loop._run_once and reads loop._selector:"
        " SelectorEventLoop internals; ringloop's native dispatcher runs its iterations"
        " without a Python _run_once and has no selector"
    ),
    "test_events.EventLoopTests.test_server_close": TCP,
    "test_events.EventLoopTests.test_ssl_connect_accepted_socket": SSL,
    # test_sendfile.SendfileTests
    "test_sendfile.SendfileTests.test_sendfile": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_close_peer_after_receiving": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_close_peer_in_the_middle_of_receiving": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_fallback_close_peer_in_the_middle_of_receiving": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_for_closing_transp": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_force_fallback": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_force_unsupported_native": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_not_supported": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_partial": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_pre_and_post_data": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_prevents_bare_write": SENDFILE_TR,
    "test_sendfile.SendfileTests.test_sendfile_ssl": SSL,
    "test_sendfile.SendfileTests.test_sendfile_ssl_close_peer_after_receiving": SSL,
    "test_sendfile.SendfileTests.test_sendfile_ssl_partial": SSL,
    "test_sendfile.SendfileTests.test_sendfile_ssl_pre_and_post_data": SSL,
    "test_sendfile.SendfileTests.test_sock_sendfile_mix_with_regular_send": SENDFILE,
    "test_sendfile.SendfileTests.test_sock_sendfile_success": SENDFILE,
    "test_sendfile.SendfileTests.test_sock_sendfile_with_offset_and_count": SENDFILE,
    "test_sendfile.SendfileTests.test_sock_sendfile_zero_size": SENDFILE,
    # test_server.StartServerTests
    "test_server.StartServerTests.test_start_server_1": TCP,
    "test_server.StartServerTests.test_start_unix_server_1": TCP,
    # test_sock_lowlevel.SockTests
    "test_sock_lowlevel.SockTests.test_create_connection_sock": TCP,
    # test_ssl.TestSSL
    "test_ssl.TestSSL.test_connect_accepted_socket": SSL,
    "test_ssl.TestSSL.test_connect_timeout_warning": SSL,
    "test_ssl.TestSSL.test_create_connection_memory_leak": SSL,
    "test_ssl.TestSSL.test_create_connection_ssl_1": SSL,
    "test_ssl.TestSSL.test_create_connection_ssl_failed_certificate": SSL,
    "test_ssl.TestSSL.test_create_connection_ssl_slow_handshake": SSL,
    "test_ssl.TestSSL.test_create_server_ssl_1": SSL,
    "test_ssl.TestSSL.test_create_server_ssl_over_ssl": SSL,
    "test_ssl.TestSSL.test_flush_before_shutdown": SSL,
    "test_ssl.TestSSL.test_handshake_timeout_handler_leak": SSL,
    "test_ssl.TestSSL.test_remote_shutdown_receives_trailing_data": SSL,
    "test_ssl.TestSSL.test_shutdown_cleanly": SSL,
    "test_ssl.TestSSL.test_shutdown_timeout_handler_leak": SSL,
    "test_ssl.TestSSL.test_shutdown_timeout_handler_not_set": SSL,
    "test_ssl.TestSSL.test_ssl_handshake_connection_lost": SSL,
    "test_ssl.TestSSL.test_ssl_handshake_timeout": SSL,
    "test_ssl.TestSSL.test_start_tls_client_buf_proto_1": SSL,
    "test_ssl.TestSSL.test_start_tls_client_corrupted_ssl": SSL,
    "test_ssl.TestSSL.test_start_tls_client_reg_proto_1": SSL,
    "test_ssl.TestSSL.test_start_tls_server_1": SSL,
    "test_ssl.TestSSL.test_start_tls_slow_client_cancel": SSL,
    # test_sslproto.StartTLSTests
    "test_sslproto.StartTLSTests.test_create_connection_memory_leak": SSL,
    "test_sslproto.StartTLSTests.test_create_connection_ssl_failed_certificate": SSL,
    "test_sslproto.StartTLSTests.test_create_connection_ssl_slow_handshake": SSL,
    "test_sslproto.StartTLSTests.test_handshake_timeout": SSL,
    "test_sslproto.StartTLSTests.test_start_tls_client_buf_proto_1": SSL,
    "test_sslproto.StartTLSTests.test_start_tls_client_corrupted_ssl": SSL,
    "test_sslproto.StartTLSTests.test_start_tls_client_reg_proto_1": SSL,
    "test_sslproto.StartTLSTests.test_start_tls_server_1": SSL,
    "test_sslproto.StartTLSTests.test_start_tls_slow_client_cancel": SSL,
}

# test id -> reason (strict: an XPASS fails the run, so fixed bugs get their entry removed)
XFAIL: dict[str, str] = {}

# tests that take more than a few seconds
SLOW: set[str] = set()
