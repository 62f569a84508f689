"""Volumes through E2B's Python SDK, both clients: a volume made, mounted
in a sandbox that writes there (a command, and the files API), killed; a
second sandbox mounting it by name reads both; list, get_info, destroy
(refused while mounted); a mount in /home/user refused naming where
volumes may go; the content API refused by name; what another key
(E2B_OTHER_KEY) cannot do.
"""

import inspect
import os

import pytest
from e2b import AsyncVolume, SandboxException, Volume, VolumeException, VolumeNotFoundException

OTHER = os.environ["E2B_OTHER_KEY"]


def test_volume(client):
    cls = AsyncVolume if client.is_async else Volume

    def call(r):
        return client.loop.run_until_complete(r) if inspect.isawaitable(r) else r

    name = "data-" + ("async" if client.is_async else "sync")
    made = []
    vol = call(cls.create(name))
    try:
        assert vol.volume_id.startswith("vol_") and vol.name == name and len(vol.token) >= 40

        a = client.create(timeout=120, volume_mounts={"/mnt/data": vol})
        made.append(a)
        r = a.commands.run("echo kept > /mnt/data/f && stat -c %U /mnt/data/f")
        assert r.stdout == "sandbox\n"
        a.files.write("/mnt/data/sub/g.txt", "by the files API")
        assert a.get_info().volume_mounts == [{"name": name, "path": "/mnt/data"}]
        with pytest.raises(VolumeException) as e:
            call(cls.destroy(vol.volume_id))
        assert "mounted in a sandbox" in str(e.value)
        a.kill()

        b = client.create(timeout=120, volume_mounts={"/srv/v": name})
        made.append(b)
        assert b.commands.run("cat /srv/v/f /srv/v/sub/g.txt").stdout == "kept\nby the files API"
        assert b.files.read("/srv/v/f") == "kept\n"

        with pytest.raises(SandboxException) as e:
            made.append(client.create(volume_mounts={"/home/user/data": name}))
        assert '"/home/user/data": /home is built by airlock; choose another place' in str(e.value)

        with pytest.raises(Exception) as e:
            call(vol.read_file("/f"))
        assert "mount the volume in a sandbox" in str(e.value)

        assert [v.name for v in call(cls.list()) if v.volume_id == vol.volume_id] == [name]
        info = call(cls.get_info(vol.volume_id))
        assert (info.volume_id, info.name) == (vol.volume_id, name)
        assert call(cls.connect(vol.volume_id)).name == name

        # Another key sees nothing of it.
        assert call(cls.list(api_key=OTHER)) == []
        with pytest.raises(VolumeNotFoundException):
            call(cls.get_info(vol.volume_id, api_key=OTHER))
        with pytest.raises(SandboxException) as e:
            made.append(client.create(api_key=OTHER, volume_mounts={"/mnt/d": name}))
        assert f'volume "{name}" not found' in str(e.value)
        assert call(cls.destroy(vol.volume_id, api_key=OTHER)) is False

        b.kill()
        assert call(cls.destroy(vol.volume_id)) is True
        assert call(cls.destroy(vol.volume_id)) is False
    finally:
        for s in made:
            try:
                s.kill()
            except Exception:
                pass
        try:
            call(cls.destroy(vol.volume_id))
        except Exception:
            pass
