import redis

from harness.stack.redis_server import RedisServer


def test_redis_url_fixture_gives_an_empty_private_database(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert client.dbsize() == 0
    client.set("k", "v")
    assert client.get("k") == b"v"


def test_appendonly_server_keeps_acknowledged_writes_across_kill(tmp_path) -> None:
    server = RedisServer(data_dir=tmp_path / "data")
    server.start()
    client = redis.Redis.from_url(server.url)
    client.set("acknowledged", "1")
    client.close()
    server.process.kill()
    server.process.wait()
    server.process = None
    server.start()
    try:
        assert redis.Redis.from_url(server.url).get("acknowledged") == b"1"
    finally:
        server.stop()
