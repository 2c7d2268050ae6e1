#!/usr/bin/python3
"""Independent Modbus peer for the drivers/modbus integration tests.

Debian's python3-pymodbus 3.0 (reports 3.0.0.rc1); run it with /usr/bin/python3
(another python3 on PATH may not see Debian's dist-packages).

  /usr/bin/python3 peer.py tcp 127.0.0.1 5020
  /usr/bin/python3 peer.py rtu /path/to/pty 115200

Data model, identical for units 1 and 17 (addresses are 0-based, zero_mode=True,
because pymodbus otherwise maps protocol address a to block index a+1):
  holding registers hr[a] = 10*a       (a = 0..199)
  input registers   ir[a] = 1000 + a
  coils             co[a] = a % 2 == 0
  discrete inputs   di[a] = a % 3 == 0
Other unit ids get no answer at all (pymodbus drops them), so clients time out.

Unit 99 is the test harness's window into the peer: holding registers 0 and 1
are the number of requests units 1 and 17 have handled (high word first). Every
read and write request validates its range exactly once, so counting validate()
calls counts transactions, including those answered with an exception.
"""
import asyncio
import sys

from pymodbus.datastore import (ModbusSequentialDataBlock, ModbusServerContext,
                                ModbusSlaveContext)
from pymodbus.server import StartAsyncSerialServer, StartAsyncTcpServer
from pymodbus.transaction import ModbusRtuFramer, ModbusSocketFramer

N = 200
requests = 0


class CountingSlave(ModbusSlaveContext):
    def validate(self, fc_as_hex, address, count=1):
        global requests
        requests += 1
        return super().validate(fc_as_hex, address, count)


class CounterSlave(ModbusSlaveContext):
    """Unit 99: serves the request counter and is not counted itself."""

    def validate(self, fc_as_hex, address, count=1):
        return fc_as_hex == 3 and address + count <= 2

    def getValues(self, fc_as_hex, address, count=1):
        words = [(requests >> 16) & 0xFFFF, requests & 0xFFFF]
        return words[address:address + count]


def data_slave():
    return CountingSlave(
        hr=ModbusSequentialDataBlock(0, [10 * a for a in range(N)]),
        ir=ModbusSequentialDataBlock(0, [1000 + a for a in range(N)]),
        co=ModbusSequentialDataBlock(0, [a % 2 == 0 for a in range(N)]),
        di=ModbusSequentialDataBlock(0, [a % 3 == 0 for a in range(N)]),
        zero_mode=True,
    )


async def main():
    mode = sys.argv[1]
    context = ModbusServerContext(
        slaves={1: data_slave(), 17: data_slave(), 99: CounterSlave(zero_mode=True)},
        single=False)
    print(f"peer starting: {sys.argv[1:]}", flush=True)
    if mode == "tcp":
        await StartAsyncTcpServer(context=context, address=(sys.argv[2], int(sys.argv[3])),
                                  framer=ModbusSocketFramer, allow_reuse_address=True)
    elif mode == "rtu":
        # StartAsyncSerialServer defaults to the ASCII framer: RTU must be explicit.
        await StartAsyncSerialServer(context=context, framer=ModbusRtuFramer,
                                     port=sys.argv[2], baudrate=int(sys.argv[3]),
                                     bytesize=8, parity="N", stopbits=1, timeout=0.05)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    asyncio.run(main())
